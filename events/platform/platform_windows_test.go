package platform

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/windows"
)

// On Windows itself: what aegis creates is private by its DACL, and a
// grant to Everyone makes a key read as open to others. (Wine keeps no
// DACLs of its own: it derives them from the Unix mode, and this test
// fails there.)
func TestWindowsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := MakePrivate(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := PathAccess(dir, fi)
	if err != nil || !a.Owned || a.Perm != 0o700 {
		t.Fatalf("a directory made private: %+v %v", a, err)
	}
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, _ = os.Stat(key)
	if a, err := PathAccess(key, fi); err != nil || !a.Owned || a.Perm != 0o600 {
		t.Fatalf("a file in it: %+v %v", a, err)
	}

	// A key readable by Everyone is refused.
	everyone, err := windows.StringToSid(SIDEveryone)
	if err != nil {
		t.Fatal(err)
	}
	acl, err := windows.ACLFromEntries([]windows.EXPLICIT_ACCESS{{
		AccessPermissions: windows.GENERIC_READ,
		AccessMode:        windows.GRANT_ACCESS,
		Trustee:           windows.TRUSTEE{TrusteeForm: windows.TRUSTEE_IS_SID, TrusteeType: windows.TRUSTEE_IS_WELL_KNOWN_GROUP, TrusteeValue: windows.TrusteeValueFromSID(everyone)},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := windows.SetNamedSecurityInfo(key, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION, nil, nil, acl, nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(key)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ = f.Stat()
	a, err = FileAccess(f, fi)
	f.Close()
	if err != nil || a.Perm&0o044 == 0 {
		t.Fatalf("a key readable by Everyone: %+v %v, want group and other read", a, err)
	}
}

// On Windows itself: the lock holds against a second open without
// blocking readers, the disk has a size, and a process that exited is not
// alive.
func TestWindowsLockDiskAlive(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, "lock")
	f1, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	if err := TryLock(f1); err != nil {
		t.Fatal(err)
	}
	if _, err := f1.WriteString("4242\n"); err != nil {
		t.Fatal(err)
	}
	f2, err := os.OpenFile(lock, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if err := TryLock(f2); err != ErrLocked {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	if b, err := os.ReadFile(lock); err != nil || string(b) != "4242\n" {
		t.Fatalf("the lock blocks a reader: %q %v", b, err)
	}
	f1.Close()
	if err := TryLock(f2); err != nil {
		t.Fatalf("after the holder closed: %v", err)
	}

	if total, free, err := DiskSpace(dir); err != nil || total == 0 || free > total {
		t.Fatalf("DiskSpace %d %d %v", total, free, err)
	}
	if !Alive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	c := exec.Command(os.Args[0], "-test.run=^$")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if Alive(c.Process.Pid) {
		t.Fatal("an exited process is alive")
	}
}
