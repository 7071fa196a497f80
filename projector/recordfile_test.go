package projector_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/verifier"
)

// nobody is the uid that stands for another local user.
const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a file another user's takes root")
	}
}

// writeFile creates path holding b with exactly mode perm (no umask).
func writeFile(t *testing.T, path string, b []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
}

// Attack: another local user pre-creates the --audit file (and its
// .checkpoints sidecar) in a shared directory, open to everyone, and waits
// for aegis to write the signed record into files they can cut and
// rewrite. Every such file is refused before the session writes anything,
// with what was refused, why, and what to do; the files are left as they
// were.
func TestAuditFilePrecreatedByAnotherUserIsRefused(t *testing.T) {
	ctx := context.Background()
	decoy := []byte("planted\n")
	for _, tc := range []struct {
		name  string
		root  bool
		plant func(t *testing.T, audit string) string // returns the file that must stay as it was
		want  []string
		hint  string
	}{
		{
			name: "record precreated by another user, mode 0666", root: true,
			plant: func(t *testing.T, audit string) string {
				writeFile(t, audit, nil, 0o666)
				if err := os.Chown(audit, nobody, nobody); err != nil {
					t.Fatal(err)
				}
				return audit
			},
			want: []string{"audit file ", "calls.aarl belongs to uid 65534, not to this user (uid 0), and is readable or writable by group or others (mode 0666); refusing to write the signed record into it"},
			hint: "another user can cut and rewrite that file",
		},
		{
			name: "record precreated by another user, mode 0600", root: true,
			plant: func(t *testing.T, audit string) string {
				writeFile(t, audit, nil, 0o600)
				if err := os.Chown(audit, nobody, nobody); err != nil {
					t.Fatal(err)
				}
				return audit
			},
			want: []string{"calls.aarl belongs to uid 65534, not to this user (uid 0); refusing to write the signed record into it"},
			hint: "remove it",
		},
		{
			name: "own record left open to everyone, mode 0666",
			plant: func(t *testing.T, audit string) string {
				writeFile(t, audit, nil, 0o666)
				return audit
			},
			want: []string{"calls.aarl is readable or writable by group or others (mode 0666); refusing to write the signed record into it"},
			hint: "chmod 600 ",
		},
		{
			name: "own record readable by its group, mode 0640",
			plant: func(t *testing.T, audit string) string {
				writeFile(t, audit, nil, 0o640)
				return audit
			},
			want: []string{"(mode 0640)"},
			hint: "chmod 600 ",
		},
		{
			name: "sidecar precreated by another user, mode 0666", root: true,
			plant: func(t *testing.T, audit string) string {
				side := audit + projector.CheckpointsSuffix
				writeFile(t, side, decoy, 0o666)
				if err := os.Chown(side, nobody, nobody); err != nil {
					t.Fatal(err)
				}
				return side
			},
			want: []string{"checkpoints file ", "calls.aarl.checkpoints belongs to uid 65534", "refusing to write the record's signed checkpoints into it"},
			hint: "another user can cut and rewrite that file",
		},
		{
			name: "record is a named pipe",
			plant: func(t *testing.T, audit string) string {
				mkfifo(t, audit)
				return ""
			},
			want: []string{"calls.aarl is not a regular file (a named pipe)"},
			hint: "give a regular file",
		},
		{
			name: "record is a link another user made to a file of ours", root: true,
			plant: func(t *testing.T, audit string) string {
				mine := filepath.Join(filepath.Dir(audit), "notes")
				writeFile(t, mine, decoy, 0o600)
				if err := os.Symlink(mine, audit); err != nil {
					t.Fatal(err)
				}
				if err := os.Lchown(audit, nobody, nobody); err != nil {
					t.Fatal(err)
				}
				return mine
			},
			want: []string{"calls.aarl is a symbolic link that belongs to uid 65534, not to this user (uid 0); refusing to write the signed record into it"},
			hint: "name the file itself",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				needRoot(t)
			}
			dir := t.TempDir()
			st := openStore(t, filepath.Join(dir, "state"))
			audit := filepath.Join(dir, "calls.aarl")
			kept := tc.plant(t, audit)
			var before []byte
			if kept != "" {
				before, _ = os.ReadFile(kept)
			}
			_, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: audit})
			var ue *projector.UnsafeFileError
			if !errors.As(err, &ue) || !errors.Is(err, projector.ErrUnsafeRecordFile) {
				t.Fatalf("OpenSession = %v, want an UnsafeFileError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(ue.Error(), w) {
					t.Errorf("error %q does not say %q", ue.Error(), w)
				}
			}
			if !strings.Contains(ue.Hint(), tc.hint) || !strings.Contains(ue.Hint(), "or choose a file in a directory only you can write") {
				t.Errorf("hint %q, want it to say %q and where to write instead", ue.Hint(), tc.hint)
			}
			if n := streamEvents(t, st); n != 0 {
				t.Errorf("the refused session wrote %d events to its stream", n)
			}
			if kept != "" {
				if after, _ := os.ReadFile(kept); !bytes.Equal(after, before) {
					t.Errorf("%s was written to: %q, was %q", kept, after, before)
				}
			}
		})
	}
}

// A .checkpoints sidecar that is a symbolic link is never followed: not
// when it is there before the session (refused at the start), nor when it
// appears during the session (the checkpoint is refused, and Close says
// so); the file it points at is left as it was.
func TestAuditSidecarSymlinkIsRefused(t *testing.T) {
	ctx := context.Background()
	decoy := []byte("planted\n")
	t.Run("there before the session", func(t *testing.T) {
		dir := t.TempDir()
		st := openStore(t, filepath.Join(dir, "state"))
		audit := filepath.Join(dir, "calls.aarl")
		target := filepath.Join(dir, "target")
		writeFile(t, target, decoy, 0o600)
		if err := os.Symlink(target, audit+projector.CheckpointsSuffix); err != nil {
			t.Fatal(err)
		}
		_, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: audit})
		var ue *projector.UnsafeFileError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "checkpoints file "+audit+projector.CheckpointsSuffix+" is a symbolic link; refusing to write the record's signed checkpoints into it") {
			t.Fatalf("OpenSession = %v, want the sidecar link refused", err)
		}
		if _, err := os.Stat(audit); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused session left a record file behind: %v", err)
		}
		if b, _ := os.ReadFile(target); !bytes.Equal(b, decoy) {
			t.Errorf("the link's target was written to: %q", b)
		}
	})
	t.Run("planted during the session", func(t *testing.T) {
		dir := t.TempDir()
		st := openStore(t, filepath.Join(dir, "state"))
		audit := filepath.Join(dir, "calls.aarl")
		target := filepath.Join(dir, "target")
		writeFile(t, target, decoy, 0o600)
		s, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: audit})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, audit+projector.CheckpointsSuffix); err != nil {
			t.Fatal(err)
		}
		err = s.Close(ctx)
		if err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
			t.Fatalf("Close = %v, want the sidecar link refused", err)
		}
		if b, _ := os.ReadFile(target); !bytes.Equal(b, decoy) {
			t.Errorf("the link's target was written to: %q", b)
		}
	})
}

// A record file of this user's with mode 0600 is appended to as before,
// and the files aegis creates are 0600.
func TestAuditOwnPrivateFileIsAppendedAsBefore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, filepath.Join(dir, "state"))
	audit := filepath.Join(dir, "calls.aarl")
	for i := range 2 {
		s, err := projector.OpenSession(ctx, projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: audit})
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
	}
	for _, p := range []string{audit, audit + projector.CheckpointsSuffix} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", p, perm)
		}
	}
	rec, _ := os.ReadFile(audit)
	if n := bytes.Count(rec, []byte(`"line_type":"open"`)); n != 2 {
		t.Errorf("the record holds %d sessions, want 2", n)
	}
	if res := verifier.Verify(bytes.NewReader(rec), verifier.Options{}); res.Verdict != verifier.Verified {
		t.Fatalf("record of two sessions: %s", verifier.Render(res))
	}
}
