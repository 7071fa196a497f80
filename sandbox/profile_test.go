package sandbox

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// TestValidateRefusesMalformedProfiles covers the problems no best effort
// excuses. They do not depend on the kernel.
func TestValidateRefusesMalformedProfiles(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		p    Profile
		want string
	}{
		{"a_relative_grant_resolved_against_an_unknown_cwd", Profile{ReadPaths: []string{"data"}}, `read path "data" is not absolute`},
		{"a_relative_write_grant", Profile{WritePaths: []string{"./out"}}, `write path "./out" is not absolute`},
		{"an_empty_grant", Profile{ReadPaths: []string{""}}, "read path is empty"},
		{"a_relative_protected_path", Profile{Protect: []string{"key"}}, `protected path "key" is not absolute`},
		{"port_zero", Profile{Net: []NetGrant{{Host: "127.0.0.1"}}}, "needs a port"},
		{"no_host", Profile{Net: []NetGrant{{Port: 443}}}, "needs a host"},
		{"a_host_name_the_kernel_cannot_enforce", Profile{Net: []NetGrant{{Host: "example.com", Port: 443}}}, "must be a numeric IP or localhost"},
		{"udp_without_a_net_grant", Profile{AllowUDP: true}, "allow UDP needs a net grant"},
		{"mptcp_without_a_net_grant", Profile{AllowMPTCP: true}, "allow MPTCP needs a net grant"},
	} {
		for _, be := range []bool{false, true} {
			p := tc.p
			p.BestEffort = be
			err := p.Validate()
			var re *RefusalError
			if !errors.As(err, &re) || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s (best effort %v): Validate = %v, want a refusal containing %q", tc.name, be, err, tc.want)
			}
		}
	}
	ok := Profile{ReadPaths: []string{dir}, Net: []NetGrant{{Host: "localhost", Port: 80}, {Host: "::1", Port: 443}}, BestEffort: true}
	if err := ok.Validate(); err != nil {
		t.Errorf("well-formed best-effort profile: %v", err)
	}
}

func TestValidateAgainstTheFilesystem(t *testing.T) {
	if abi, err := ll.LandlockGetABIVersion(); err != nil || abi < requiredABI {
		t.Skipf("landlock ABI %d < %d: every strict profile is refused here", abi, requiredABI)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		p    Profile
		want string // "" means valid
	}{
		{"the_empty_profile_denies_everything_and_is_valid", Profile{}, ""},
		{"a_missing_grant", Profile{ReadPaths: []string{filepath.Join(dir, "nope")}}, "cannot be used"},
		{"a_missing_grant_under_best_effort", Profile{ReadPaths: []string{filepath.Join(dir, "nope")}, BestEffort: true}, ""},
		{"the_root_directory_covers_every_protected_path", Profile{ReadPaths: []string{"/"}, Protect: []string{filepath.Join(dir, "key")}}, "covers protected path"},
		{"exec_support_covers_a_key_kept_in_etc", Profile{ExecSupport: true, Protect: []string{"/etc/aegis/key"}}, `grant "/etc" covers protected path "/etc/aegis/key"`},
		{"a_protected_path_that_does_not_exist_yet", Profile{WritePaths: []string{dir}, Protect: []string{filepath.Join(dir, "later", "key")}}, "covers protected path"},
		{"mptcp_is_never_restricted_by_landlock", Profile{Net: []NetGrant{{Host: "127.0.0.1", Port: 1}}, AllowMPTCP: true}, "MPTCP"},
	} {
		err := tc.p.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate = %v, want a refusal containing %q", tc.name, err, tc.want)
		}
	}
}

func TestProfileAndFactJSON(t *testing.T) {
	p := Profile{ReadPaths: []string{"/a"}, WritePaths: []string{"/b"}, Net: []NetGrant{{Host: "127.0.0.1", Port: 8080}},
		ExecSupport: true, BestEffort: true, Protect: []string{"/k"}, AllowUDP: true, AllowMPTCP: true}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Profile
	if err := decodeStrict(b, &back); err != nil || !reflect.DeepEqual(back, p) {
		t.Fatalf("profile round trip: %v, %+v", err, back)
	}
	if err := decodeStrict([]byte(`{"read_paths":["/a"],"allow_everything":true}`), &back); err == nil {
		t.Fatal("the helper accepted an unknown profile field")
	}
	refused, err := json.Marshal(refusedFact("no", 7))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"refused":"no","landlock_abi":0,"kernel_landlock_abi":7,"landlock_fully_enforced":false,` +
		`"landlock_tcp_restricted":false,"net_hosts_enforced":false,"exec_support":false,"seccomp_applied":false,` +
		`"seccomp_network_denied":false,"io_uring_denied":false,"keyrings_denied":false,"session_keyring_fresh":false,` +
		`"no_new_privs":false,"protected_verified":false}`
	if string(refused) != want {
		t.Fatalf("refusal fact\n got %s\nwant %s", refused, want)
	}
}
