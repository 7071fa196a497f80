package projector

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSegmentName(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/r/calls.aarl", "/r/calls.000003.aarl"},
		{"/r/calls", "/r/calls.000003"},
		{"/r/.calls", "/r/.calls.000003"},
		{"/r/a.b.jsonl", "/r/a.b.000003.jsonl"},
	} {
		if got := SegmentName(tc.path, 3); got != tc.want {
			t.Errorf("SegmentName(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// ApplySeals can be run again after a crash at any step, and never
// replaces a file it did not plan to move.
func TestApplySealsAfterACrashAndAgainstSwappedFiles(t *testing.T) {
	content := []byte("line one\nline two\n")
	setup := func(t *testing.T) (Rotation, string, string) {
		dir := t.TempDir()
		live := filepath.Join(dir, "calls.aarl")
		if err := os.WriteFile(live, content, 0o600); err != nil {
			t.Fatal(err)
		}
		seg := SegmentName(live, 1)
		return Rotation{Records: []SealedRecord{{Path: live, SealedAs: seg, Lines: 2, Bytes: int64(len(content)), Checkpoint: "note\n"}}}, live, seg
	}
	sealed := func(t *testing.T, live, seg string) {
		t.Helper()
		if _, err := os.Stat(live); !os.IsNotExist(err) {
			t.Fatalf("live file left: %v", err)
		}
		if b, _ := os.ReadFile(seg); string(b) != string(content) {
			t.Fatalf("segment holds %q", b)
		}
		if b, _ := os.ReadFile(seg + CheckpointSuffix); string(b) != "note\n" {
			t.Fatalf("checkpoint holds %q", b)
		}
	}
	t.Run("twice", func(t *testing.T) {
		r, live, seg := setup(t)
		for range 2 {
			if err := ApplySeals(r); err != nil {
				t.Fatal(err)
			}
		}
		sealed(t, live, seg)
	})
	t.Run("crash between link and remove", func(t *testing.T) {
		r, live, seg := setup(t)
		if err := os.Link(live, seg); err != nil {
			t.Fatal(err)
		}
		if err := ApplySeals(r); err != nil {
			t.Fatal(err)
		}
		sealed(t, live, seg)
	})
	t.Run("a different file under the segment name", func(t *testing.T) {
		r, live, seg := setup(t)
		if err := os.WriteFile(seg, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := ApplySeals(r); err == nil || !strings.Contains(err.Error(), "different files") {
			t.Fatalf("ApplySeals = %v", err)
		}
		if _, err := os.Stat(live); err != nil {
			t.Fatal("the live file was removed")
		}
	})
	t.Run("the live file written to after the plan", func(t *testing.T) {
		r, live, _ := setup(t)
		if err := os.WriteFile(live, append(content, "three\n"...), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := ApplySeals(r); err == nil || !strings.Contains(err.Error(), "written to since") {
			t.Fatalf("ApplySeals = %v", err)
		}
	})
}
