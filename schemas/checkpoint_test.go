package schemas

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateCheckpoint = flag.Bool("update", false, "rewrite the golden files under testdata/checkpoint")

func exampleCheckpoint() Checkpoint {
	return Checkpoint{
		Origin: "aegis/" + strings.Repeat("7", 64) + "/audit.000001.jsonl",
		Size:   1204,
		Root:   sha256.Sum256([]byte("root")),
		Tail:   HashHex([]byte("last line")),
	}
}

// TestCheckpointBodyGolden pins the encoding: a verifier written from the
// documentation must read the bytes aegis writes.
func TestCheckpointBodyGolden(t *testing.T) {
	for _, tc := range []struct {
		file string
		cp   Checkpoint
	}{
		{"body.golden", exampleCheckpoint()},
		{"empty.golden", Checkpoint{Origin: "aegis/" + strings.Repeat("7", 64) + "/audit.000002.jsonl", Root: sha256.Sum256(nil)}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "checkpoint", tc.file)
			got := tc.cp.Body()
			if *updateCheckpoint {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Body() =\n%s\nwant\n%s", got, want)
			}
			back, err := ParseCheckpoint(want)
			if err != nil {
				t.Fatalf("ParseCheckpoint(golden): %v", err)
			}
			if back != tc.cp {
				t.Fatalf("ParseCheckpoint(golden) = %+v, want %+v", back, tc.cp)
			}
		})
	}
}

// TestParseCheckpointRefuses: every body that is not the one encoding of a
// checkpoint is refused, so that no two bodies commit to the same record
// and no reader can be led to take a different value from the same bytes.
func TestParseCheckpointRefuses(t *testing.T) {
	good := string(exampleCheckpoint().Body())
	lines := strings.SplitAfter(good, "\n")
	origin, size, root, tail := lines[0], lines[1], lines[2], lines[3]
	for _, tc := range []struct{ name, body string }{
		{"empty body", ""},
		{"last line torn (no final newline)", strings.TrimSuffix(good, "\n")},
		{"tail left out to hide the last line", origin + size + root},
		{"extension line smuggled in", good + "aegis-note hello\n"},
		{"second tail line", good + tail},
		{"tail on an empty file", origin + "0\n" + root + tail},
		{"size with a leading zero", origin + "01204\n" + root + tail},
		{"size with a sign", origin + "+1204\n" + root + tail},
		{"negative size", origin + "-1\n" + root + tail},
		{"size beyond int64", origin + "9223372036854775808\n" + root + tail},
		{"size in hex", origin + "0x4b4\n" + root + tail},
		{"root of 31 bytes", origin + size + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==\n" + tail},
		{"root without padding", origin + size + strings.TrimRight(root, "=\n") + "\n" + tail},
		{"root in url-safe base64", origin + size + strings.NewReplacer("+", "-", "/", "_").Replace(root) + tail},
		{"root with non-canonical trailing bits", origin + size + strings.Replace(root, "=\n", "", 1)[:42] + "B=\n" + tail},
		{"uppercase tail hash", origin + size + root + strings.ToUpper(tail[:len(tail)-1]) + "\n"},
		{"short tail hash", origin + size + root + tail[:len(tail)-2] + "\n"},
		{"tail without its keyword", origin + size + root + strings.TrimPrefix(tail, CheckpointTailPrefix)},
		{"CRLF line endings", strings.ReplaceAll(good, "\n", "\r\n")},
		{"empty origin", "\n" + size + root + tail},
		{"origin with a trailing space", strings.TrimSuffix(origin, "\n") + " \n" + size + root + tail},
		{"origin with a control character", "aegis/\x1b[2J\n" + size + root + tail},
		{"origin not UTF-8", "aegis/\xff\n" + size + root + tail},
		{"signature block parsed as body", good + "\n— aegis-x AAAA\n"},
		{"oversized body", origin + size + root + tail + strings.Repeat("x", MaxCheckpointBody) + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, err := ParseCheckpoint([]byte(tc.body))
			if err == nil {
				t.Fatalf("ParseCheckpoint(%q) = %+v, want an error", tc.body, cp)
			}
			if !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("error %v does not wrap ErrCheckpoint", err)
			}
		})
	}
}

// FuzzParseCheckpoint: whatever parses has exactly one encoding, the input.
func FuzzParseCheckpoint(f *testing.F) {
	f.Add(exampleCheckpoint().Body())
	f.Add(Checkpoint{Origin: "o", Root: sha256.Sum256(nil)}.Body())
	f.Add([]byte("o\n1\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\naegis-tail " + strings.Repeat("0", 64) + "\n"))
	f.Add([]byte("o\n01\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		cp, err := ParseCheckpoint(body)
		if err != nil {
			if !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("error %v does not wrap ErrCheckpoint", err)
			}
			return
		}
		if got := cp.Body(); !bytes.Equal(got, body) {
			t.Fatalf("Body(ParseCheckpoint(%q)) = %q", body, got)
		}
		if cp.Size < 0 || (cp.Size == 0) != (cp.Tail == "") {
			t.Fatalf("ParseCheckpoint(%q) = %+v", body, cp)
		}
	})
}
