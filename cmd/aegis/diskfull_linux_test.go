package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountTmpfs mounts a small tmpfs for a test that fills a disk. It needs
// root, which CI has.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fillDisk takes every byte still free on the filesystem of dir.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for len(buf) > 0 {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the disk: %v", err)
			}
			buf = buf[:len(buf)/2]
		}
	}
	diskFree(t, dir, 0)
}

// diskFree fails the test unless the filesystem of dir has want bytes
// free.
func diskFree(t *testing.T, dir string, want uint64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Bavail * uint64(st.Bsize); got != want {
		t.Fatalf("%d bytes free on the disk of %s, want %d", got, dir, want)
	}
}

// On a disk with not one byte free, the read commands read: sessions,
// replay, events list, pins and export open the stream read-only and
// write nothing. While an aegis holds the directory, sessions lists from the
// index it keeps, and replay, which has no room for a copy of the stream,
// reads the holder's stream itself (or, if that offers no reader, says
// that the disk is full and which one).
func TestReadCommandsWorkOnADiskWithNoByteFree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aegis wrap")
	}
	t.Parallel() // it mostly waits on processes: beside the others
	mnt := mountTmpfs(t, "16m")
	l := newLive(t, "")
	l.state = filepath.Join(mnt, "state")
	l.session(2)
	l.session(1)
	ids := l.sessionIDs()
	replayed := l.mustAegis("replay", "--state-dir", l.state, "last")
	listed := l.mustAegis("events", "list", "--state-dir", l.state)

	w := l.wrap(false)
	w.initialize()
	// Its first save of the index (a second after it starts) lists it.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if out, _ := l.aegis("sessions", "--state-dir", l.state); strings.Contains(out, "running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the running wrap's index never listed it")
		}
	}
	fillDisk(t, mnt)
	out, code := l.aegis("sessions", "--state-dir", l.state)
	if code != 0 || !strings.Contains(out, ids[0]) || !strings.Contains(out, "running") {
		t.Fatalf("sessions of a held directory on a full disk: exit %d\n%s", code, out)
	}
	out, code = l.aegis("replay", "--state-dir", l.state, "last")
	if code != 0 || !strings.Contains(out, "its disk is full, with no room for a snapshot; reading that process's stream itself") ||
		!strings.Contains(out, "initialize") || !strings.Contains(out, "running") {
		t.Fatalf("replay of a held directory on a full disk: exit %d\n%s", code, out)
	}
	// Without the holder's reader there is nothing to read but a copy,
	// and no room for one: the error names the full disk.
	creds, _ := filepath.Glob(filepath.Join(l.runtime, "aegis", "approve-*.json"))
	if len(creds) != 1 {
		t.Fatalf("credentials files %v", creds)
	}
	hidden := filepath.Join(l.dir, "creds.json")
	if err := os.Rename(creds[0], hidden); err != nil {
		t.Fatal(err)
	}
	out, code = l.aegis("replay", "--state-dir", l.state, "last")
	if code != 1 || !strings.Contains(out, "is full: 0 B free") || !strings.Contains(out, "aegis: hint: free space on the disk that holds "+l.state) {
		t.Fatalf("replay of a held directory on a full disk, with no reader: exit %d; want exit 1 naming the full disk\n%s", code, out)
	}
	if err := os.Rename(hidden, creds[0]); err != nil {
		t.Fatal(err)
	}
	// aegis wrap dies of the full disk, say.
	w.kill()

	diskFree(t, mnt, 0)
	out, code = l.aegis("sessions", "--state-dir", l.state)
	if code != 0 || !strings.Contains(out, ids[1]) || !strings.Contains(out, "killed") {
		t.Fatalf("sessions on a full disk: exit %d\n%s", code, out)
	}
	diskFree(t, mnt, 0)
	if got := l.mustAegis("replay", "--state-dir", l.state, ids[1]); got != replayed {
		t.Fatalf("replay on a full disk:\n%s\nwant\n%s", got, replayed)
	}
	diskFree(t, mnt, 0)
	if got := l.mustAegis("events", "list", "--state-dir", l.state); !strings.HasPrefix(got, listed) {
		t.Fatalf("events list on a full disk:\n%s\nwant it to begin with\n%s", got, listed)
	}
	diskFree(t, mnt, 0)
	if out, code := l.aegis("pins", "--state-dir", l.state); code != 0 {
		t.Fatalf("pins on a full disk: exit %d\n%s", code, out)
	}
	diskFree(t, mnt, 0)
	exported := filepath.Join(l.dir, "export.aarl") // on another disk
	l.mustAegis("export", "--state-dir", l.state, "--out", exported)
	if b := readFile(t, exported); !strings.HasPrefix(string(b), string(readFile(t, l.audit))[:100]) {
		t.Fatal("export on a full disk does not hold the record")
	}
	diskFree(t, mnt, 0)
}
