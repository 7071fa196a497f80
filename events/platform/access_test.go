package platform

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

const (
	alice = "S-1-5-21-1004336348-1177238915-682003330-1001"
	bob   = "S-1-5-21-1004336348-1177238915-682003330-1002"

	fullControl    = 0x001f01ff // FILE_ALL_ACCESS
	readExecute    = 0x001200a9 // icacls (RX)
	readOnly       = 0x00120089 // icacls (R)
	modify         = 0x001301bf // icacls (M)
	readAttributes = 0x00100080 // SYNCHRONIZE | FILE_READ_ATTRIBUTES
	appendData     = 0x00000004 // FILE_APPEND_DATA (a directory: add a subdirectory)
	writeDAC       = 0x00040000
	genericRead    = 0x80000000
	genericAll     = 0x10000000
	inheritOnly    = 0x08 // INHERIT_ONLY_ACE
	objectInherit  = 0x01
)

// JudgeDACL is what stands, on Windows, for the owner and mode bits that
// Linux checks: a key, a credentials file or the state directory that
// someone other than the user, SYSTEM and Administrators can open must
// read as open to group and others (mode&0o077 != 0), so that the same
// checks refuse it.
func TestJudgeDACL(t *testing.T) {
	private := []ACE{
		{Type: aceAllowed, Mask: fullControl, SID: alice},
		{Type: aceAllowed, Mask: fullControl, SID: SIDSystem},
		{Type: aceAllowed, Mask: fullControl, SID: SIDAdmins},
	}
	with := func(extra ...ACE) []ACE { return append(append([]ACE{}, private...), extra...) }
	for _, tc := range []struct {
		name    string
		dir     bool
		owner   string
		dacl    []ACE
		present bool
		perm    fs.FileMode
		owned   bool
	}{
		{name: "a key of the user's, SYSTEM's and Administrators' alone passes", owner: alice, dacl: private, present: true, perm: 0o600, owned: true},
		{name: "a state directory of the user's, SYSTEM's and Administrators' alone passes", dir: true, owner: alice, dacl: private, present: true, perm: 0o700, owned: true},
		{name: "a key readable by Everyone is refused", owner: alice, dacl: with(ACE{Type: aceAllowed, Mask: readOnly, SID: SIDEveryone}), present: true, perm: 0o644, owned: true},
		{name: "a key readable by generic read for Users is refused", owner: alice, dacl: with(ACE{Type: aceAllowed, Mask: genericRead, SID: SIDUsers}), present: true, perm: 0o644, owned: true},
		{name: "a state directory Authenticated Users may modify (a folder under C:\\) is refused", dir: true, owner: alice, dacl: with(ACE{Type: aceAllowed, Mask: modify, SID: SIDAuthenticatedUsers}), present: true, perm: 0o777, owned: true},
		{name: "a runtime directory where Users may only add subdirectories is refused", dir: true, owner: alice, dacl: with(ACE{Type: aceAllowed, Mask: appendData, SID: SIDUsers}), present: true, perm: 0o722, owned: true},
		{name: "a credentials file another user may change the DACL of is refused", owner: alice, dacl: with(ACE{Type: aceAllowed, Mask: writeDAC, SID: bob}), present: true, perm: 0o622, owned: true},
		{name: "a directory that passes read and traverse on to its files for Users is refused", dir: true, owner: alice, dacl: with(ACE{Type: aceAllowed, Flags: inheritOnly | objectInherit, Mask: readExecute, SID: SIDUsers}), present: true, perm: 0o755, owned: true},
		{name: "a file with no DACL (everyone has full control) is refused", owner: alice, present: false, perm: 0o677, owned: true},
		{name: "a file granted GENERIC_ALL to another user is refused", owner: alice, dacl: with(ACE{Type: aceAllowed, Mask: genericAll, SID: bob}), present: true, perm: 0o677, owned: true},
		{name: "an entry of a type not known here is refused", owner: alice, dacl: with(ACE{Type: 0x4, Mask: readAttributes, SID: bob}), present: true, perm: 0o677, owned: true},
		{name: "an allowing object entry, whose SID is not read, is refused even for the user", owner: alice, dacl: with(ACE{Type: aceAllowedObject, Mask: readOnly}), present: true, perm: 0o644, owned: true},
		{name: "an allowing entry whose SID could not be read is refused", owner: alice, dacl: with(ACE{Type: aceAllowedCallback, Mask: fullControl}), present: true, perm: 0o677, owned: true},
		{name: "a deny entry before an allow for Everyone does not hide it", owner: alice, dacl: with(ACE{Type: aceDenied, Mask: fullControl, SID: SIDEveryone}, ACE{Type: aceAllowed, Mask: readOnly, SID: SIDEveryone}), present: true, perm: 0o644, owned: true},
		{name: "a deny entry alone takes nothing away from a private file", owner: alice, dacl: with(ACE{Type: aceDenied, Mask: fullControl, SID: SIDEveryone}), present: true, perm: 0o600, owned: true},
		{name: "reading attributes and the security descriptor is not access to the content", owner: alice, dacl: with(ACE{Type: aceAllowed, Mask: readAttributes | 0x00020000, SID: SIDEveryone}), present: true, perm: 0o600, owned: true},
		{name: "CREATOR OWNER and OWNER RIGHTS stand for the user", dir: true, owner: alice, dacl: with(ACE{Type: aceAllowed, Flags: inheritOnly, Mask: fullControl, SID: SIDCreatorOwner}, ACE{Type: aceAllowed, Mask: fullControl, SID: SIDOwnerRights}), present: true, perm: 0o700, owned: true},
		{name: "a key owned by another user, who may rewrite its DACL, is refused", owner: bob, dacl: private, present: true, perm: 0o677, owned: false},
		{name: "a key owned by another user that grants that user access is refused twice", owner: bob, dacl: with(ACE{Type: aceAllowed, Mask: fullControl, SID: bob}), present: true, perm: 0o677, owned: false},
		{name: "a file with no owner is refused", owner: "", dacl: private, present: true, perm: 0o677, owned: false},
		{name: "a file an elevated user made, owned by Administrators, is the user's", owner: SIDAdmins, dacl: private, present: true, perm: 0o600, owned: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := JudgeDACL(tc.dir, tc.owner, alice, tc.dacl, tc.present)
			if a.Perm != tc.perm || a.Owned != tc.owned {
				t.Fatalf("perm %#o owned %v, want %#o owned %v", a.Perm, a.Owned, tc.perm, tc.owned)
			}
			if !a.Owned && a.Perm&0o077 == 0 {
				t.Fatalf("a file of another's passes the mode check (perm %#o)", a.Perm)
			}
		})
	}
}

// The Unix side reads the owner and mode as they are, and the lock is
// held against a second open of the same file, in this process too, as a
// second aegis would find it.
func TestUnixAccessAndLock(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("TestWindowsLockDiskAlive")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "lock")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	a, err := PathAccess(p, fi)
	if err != nil || !a.Owned || a.Owner != a.Me || a.Perm != 0o644 {
		t.Fatalf("%+v %v", a, err)
	}
	f1, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	f2, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if err := TryLock(f1); err != nil {
		t.Fatal(err)
	}
	if err := TryLock(f2); err != ErrLocked {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	f1.Close()
	if err := TryLock(f2); err != nil {
		t.Fatalf("after the holder closed: %v", err)
	}
	if !Alive(os.Getpid()) || Alive(0) || Alive(-1) {
		t.Fatal("Alive")
	}
	if total, free, err := DiskSpace(dir); err != nil || total == 0 || free > total {
		t.Fatalf("DiskSpace %d %d %v", total, free, err)
	}
	if err := os.Symlink(p, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenNoFollow(filepath.Join(dir, "link"), os.O_RDONLY, 0); err == nil {
		t.Fatal("a symbolic link was followed")
	}
}

// What a refusal tells the user to run fixes the file on its own system.
func TestFixCommand(t *testing.T) {
	for _, tc := range []struct {
		goos string
		dir  bool
		want string
	}{
		{"linux", true, "chmod 700 /s"},
		{"darwin", false, "chmod 600 /s"},
		{"windows", true, `icacls "/s" /inheritance:r /grant:r "%USERNAME%:(OI)(CI)F" "SYSTEM:(OI)(CI)F" "Administrators:(OI)(CI)F"`},
		{"windows", false, `icacls "/s" /inheritance:r /grant:r "%USERNAME%:F" "SYSTEM:F" "Administrators:F"`},
	} {
		if got := fixCommand(tc.goos, "/s", tc.dir); got != tc.want {
			t.Errorf("%s dir=%v: %s, want %s", tc.goos, tc.dir, got, tc.want)
		}
	}
	if got := modeWords("linux", 0o755); got != "has mode 0755" {
		t.Errorf("linux: %s", got)
	}
	if got := modeWords("windows", 0o644); got != "grants access to users other than you, SYSTEM and Administrators (read as mode 0644)" {
		t.Errorf("windows: %s", got)
	}
}
