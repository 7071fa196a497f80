package policy

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func disclosureGateway(t *testing.T, mode string) *Gateway {
	t.Helper()
	return mustGateway(t, y(
		"servers: {filesystem: {command: a}, sonarqube: {command: a}}",
		"profiles:",
		"  default: {allow: [filesystem.read_file], resources: [\"file:///repo/**\"]}",
		"  code-review: {allow: [sonarqube.scan]}",
		"activation: {default_profile: default}",
		"error_disclosure: "+mode,
	))
}

// decode parses a payload into a map, so that tests compare members, not
// substrings.
func decode(t *testing.T, e *GatewayError) map[string]any {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("payload %s: %v", b, err)
	}
	return m
}

// TestDisclosureModes: verbose names the profile that would grant a denied
// capability; minimal never does, and is otherwise the same payload
// (upstream TestVerboseDenialNamesGrantingProfile).
func TestDisclosureModes(t *testing.T) {
	verbose := decode(t, disclosureGateway(t, "verbose").CapDenied("default", "sonarqube", "scan"))
	want := map[string]any{
		"code":             "AEGIS_CAP_DENIED",
		"capability":       "sonarqube.scan",
		"active_profile":   "default",
		"hint":             "capability requires a profile that allows it",
		"required_profile": "code-review",
	}
	if !reflect.DeepEqual(verbose, want) {
		t.Errorf("verbose payload = %v, want %v", verbose, want)
	}
	minimal := decode(t, disclosureGateway(t, "minimal").CapDenied("default", "sonarqube", "scan"))
	if _, present := minimal["required_profile"]; present {
		t.Errorf("minimal payload discloses required_profile: %v", minimal)
	}
	delete(want, "required_profile")
	if !reflect.DeepEqual(minimal, want) {
		t.Errorf("minimal payload = %v, want %v", minimal, want)
	}
	// Verbose, but no profile grants it: no member rather than an empty one.
	none := decode(t, disclosureGateway(t, "verbose").CapDenied("default", "sonarqube", "delete"))
	if _, present := none["required_profile"]; present {
		t.Errorf("payload names a profile nobody has: %v", none)
	}
	// Resource denials never name a profile, in either mode.
	for _, mode := range []string{"verbose", "minimal"} {
		got := decode(t, disclosureGateway(t, mode).ResourceDenied("default", "file:///etc/passwd"))
		want := map[string]any{
			"code":           "AEGIS_RESOURCE_DENIED",
			"uri":            "file:///etc/passwd",
			"active_profile": "default",
			"hint":           "resource not permitted in active profile",
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s resource payload = %v, want %v", mode, got, want)
		}
	}
}

// TestGatewayErrorPayloads: each code has exactly its members, in sorted
// order as upstream's map-built payloads, even when a value is empty, and
// without HTML escaping.
func TestGatewayErrorPayloads(t *testing.T) {
	g := disclosureGateway(t, "verbose")
	tests := []struct {
		name string
		err  *GatewayError
		want string
	}{
		{"CapDenied", g.CapDenied("default", "sonarqube", "scan"),
			`{"active_profile":"default","capability":"sonarqube.scan","code":"AEGIS_CAP_DENIED","hint":"capability requires a profile that allows it","required_profile":"code-review"}`},
		{"ResourceDenied", g.ResourceDenied("default", "file:///a?b=<c>&d"),
			`{"active_profile":"default","code":"AEGIS_RESOURCE_DENIED","hint":"resource not permitted in active profile","uri":"file:///a?b=<c>&d"}`},
		{"ResourceDeniedEmptyURI", g.ResourceDenied("default", ""),
			`{"active_profile":"default","code":"AEGIS_RESOURCE_DENIED","hint":"resource not permitted in active profile","uri":""}`},
		{"ProfileUnknown", ProfileUnknownError("ghost"),
			`{"code":"AEGIS_PROFILE_UNKNOWN","hint":"no such profile","requested_profile":"ghost"}`},
		{"PendingApproval", PendingApprovalError("apr_7f3c", "default", "deploy"),
			`{"active_profile":"default","approval_id":"apr_7f3c","code":"AEGIS_PENDING_APPROVAL","hint":"human approval requested; re-issue set_profile or poll aegis.approval_status","requested_profile":"deploy"}`},
		{"QuotesEscaped", ProfileUnknownError("a\"b\n"),
			`{"code":"AEGIS_PROFILE_UNKNOWN","hint":"no such profile","requested_profile":"a\"b\n"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.JSON(); got != tc.want {
				t.Errorf("JSON() =\n%s\nwant\n%s", got, tc.want)
			}
			if !json.Valid([]byte(tc.err.JSON())) {
				t.Error("JSON() is not valid JSON")
			}
			if tc.err.Hint() == "" {
				t.Error("Hint() is empty")
			}
			var err error = tc.err
			var ge *GatewayError
			if !errors.As(err, &ge) || ge.Code != tc.err.Code {
				t.Errorf("errors.As lost the code")
			}
			if err.Error() == "" {
				t.Error("Error() is empty")
			}
		})
	}
	if _, err := json.Marshal(&GatewayError{Code: "AEGIS_NOPE"}); err == nil {
		t.Error("an unknown code marshalled")
	}
	if got := (&GatewayError{Code: "AEGIS_NOPE"}).JSON(); got != "" {
		t.Errorf("JSON() of an unknown code = %q", got)
	}
}

func TestGatewayErrorMessages(t *testing.T) {
	g := disclosureGateway(t, "verbose")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{g.CapDenied("default", "sonarqube", "scan"), `AEGIS_CAP_DENIED: "sonarqube.scan" not allowed in profile "default"`},
		{g.ResourceDenied("default", "file:///x"), `AEGIS_RESOURCE_DENIED: "file:///x" not permitted in profile "default"`},
		{ProfileUnknownError("ghost"), `AEGIS_PROFILE_UNKNOWN: no profile "ghost"`},
		{PendingApprovalError("apr_1", "a", "b"), `AEGIS_PENDING_APPROVAL: switch from "a" to "b" awaits approval apr_1`},
		{&GatewayError{Code: "X"}, "X"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}
