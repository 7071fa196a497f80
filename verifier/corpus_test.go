package verifier

import (
	"bytes"
	"crypto/ed25519"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/schemas"
)

var update = flag.Bool("update", false, "rewrite testdata/corpus from the case table")

const corpusDir = "testdata/corpus"

// corpusCase is one record in testdata/corpus: <name>.aarl holds the record,
// <name>.want the options and the expected output (see parseWant).
type corpusCase struct {
	name  string
	pin   string // none | dev | other | empty | dev,other; +gaps: AllowGaps
	want  Code   // "" for Verified
	build func(t *testing.T) []byte
}

// goodSession writes open, two answered calls, a decision and close.
func goodSession(w *testWriter) *testWriter {
	return w.open().
		intent("call-1").outcome("call-1").
		intent("call-2").outcome("call-2").
		decision("apr-gate-echo-1").
		close()
}

func corpusCases() []corpusCase {
	dev := func(t *testing.T) *testWriter { return newTestWriter(t, devKey()) }
	return []corpusCase{
		// Verified records.
		{"verified", "none", "", func(t *testing.T) []byte { return goodSession(dev(t)).bytes() }},
		{"verified_pinned", "dev", "", func(t *testing.T) []byte { return goodSession(dev(t)).bytes() }},
		{"verified_two_sessions", "none", "", func(t *testing.T) []byte {
			return goodSession(goodSession(dev(t))).bytes()
		}},
		{"verified_rotated_keys", "dev,other", "", func(t *testing.T) []byte {
			w := goodSession(dev(t))
			w.key = otherKey()
			return goodSession(w).bytes()
		}},
		// A session killed without close is anchored by the next open.
		{"verified_killed_session_anchored", "none", "", func(t *testing.T) []byte {
			w := dev(t).open().intent("call-1")
			return goodSession(w).bytes()
		}},

		// Tampered: an unsigned intent edited after the fact; the next line
		// still chains to the original.
		{"chain_broken", "none", ChainBroken, func(t *testing.T) []byte {
			return goodSession(dev(t)).edit(1, set("tool_id", "rm-rf")).bytes()
		}},
		// Two lines swapped.
		{"chain_broken_reordered", "none", ChainBroken, func(t *testing.T) []byte {
			w := goodSession(dev(t))
			w.lines[1], w.lines[3] = w.lines[3], w.lines[1]
			w.edit(1, set(schemas.FieldSeq, 1)).edit(3, set(schemas.FieldSeq, 3))
			return w.bytes()
		}},
		// A writer that reused a seq, with the chain otherwise intact.
		{"seq_out_of_order", "none", SeqOutOfOrder, func(t *testing.T) []byte {
			w := dev(t).open().intent("call-1")
			return w.intent("call-2", pre(set(schemas.FieldSeq, 1))).outcome("call-2").close().bytes()
		}},
		// A signed outcome whose verdict was changed after signing.
		{"bad_signature", "none", BadSignature, func(t *testing.T) []byte {
			return goodSession(dev(t)).edit(2, set("policy", map[string]any{"status": "allowed"})).
				edit(2, set("tool_id", "exfiltrate")).bytes()
		}},
		// The signature stripped from a signed line (and the chain rebuilt).
		{"bad_signature_missing", "none", BadSignature, func(t *testing.T) []byte {
			return dev(t).open().intent("call-1").outcome("call-1", unsigned()).close().bytes()
		}},
		// An outcome signed under a key the session did not publish.
		{"key_id_mismatch", "none", BadSignature, func(t *testing.T) []byte {
			return dev(t).open().intent("call-1").outcome("call-1", signedBy(otherKey())).close().bytes()
		}},
		// An open that publishes a small-order public key, which would let
		// forged signatures verify.
		{"bad_signature_small_order_key", "none", BadSignature, func(t *testing.T) []byte {
			zero := strings.Repeat("00", 32)
			return dev(t).open(pre(set(schemas.FieldPublicKey, zero))).close().bytes()
		}},
		// An unknown line type carrying a signature that does not verify.
		{"bad_signature_unknown_type", "none", BadSignature, func(t *testing.T) []byte {
			w := dev(t).open()
			w.add(schemas.NewLine("heartbeat"), pre(func(l *schemas.Line) {
				set(schemas.FieldKeyID, schemas.KeyID(pubOf(devKey())))(l)
				set(schemas.FieldSignature, strings.Repeat("ab", 64))(l)
			}))
			return w.close().bytes()
		}},
		// In an unanchored tail, unsigned intents are expected, but an
		// unsigned outcome is forged.
		{"unsigned_outcome_in_tail", "none", BadSignature, func(t *testing.T) []byte {
			return dev(t).open().intent("call-1").outcome("call-1", unsigned()).intent("call-2").bytes()
		}},
		// The close (and so the tail) of a non-final session cut away.
		{"session_boundary_broken", "none", SessionBoundaryBroken, func(t *testing.T) []byte {
			w := goodSession(goodSession(dev(t)))
			return w.drop(6).bytes()
		}},
		{"session_boundary_missing_tail", "none", SessionBoundaryBroken, func(t *testing.T) []byte {
			w := goodSession(dev(t))
			return goodSessionOpenedWith(w, pre(del(schemas.FieldPrevSessionTail))).bytes()
		}},
		// The first session removed: the record now starts with an open that
		// links to a session that is not there.
		{"session_boundary_head_cut", "none", SessionBoundaryBroken, func(t *testing.T) []byte {
			w := goodSession(goodSession(dev(t)))
			w.lines = w.lines[7:]
			return w.bytes()
		}},
		// The open removed: the record starts mid-session.
		{"session_boundary_no_open", "none", SessionBoundaryBroken, func(t *testing.T) []byte {
			return goodSession(dev(t)).drop(0).bytes()
		}},
		// A line appended after close, chained correctly.
		{"session_boundary_after_close", "none", SessionBoundaryBroken, func(t *testing.T) []byte {
			return goodSession(dev(t)).intent("call-9").bytes()
		}},
		{"malformed_line", "none", MalformedLine, func(t *testing.T) []byte {
			w := dev(t).open().intent("call-1")
			w.lines[1] = w.lines[1][:len(w.lines[1])/2]
			return w.outcome("call-1").close().bytes()
		}},
		{"malformed_line_null", "none", MalformedLine, func(t *testing.T) []byte {
			w := dev(t).open().intent("call-1")
			w.lines[1] = bytes.Replace(w.lines[1], []byte(`"tool_id":"echo"`), []byte(`"tool_id":null`), 1)
			return w.outcome("call-1").close().bytes()
		}},
		// A final line that is JSON but outside the value space is not torn.
		{"malformed_line_final_float", "none", MalformedLine, func(t *testing.T) []byte {
			w := goodSession(dev(t))
			n := len(w.lines) - 1
			w.lines[n] = bytes.Replace(w.lines[n], []byte(`"seq":6`), []byte(`"seq":6.0`), 1)
			return w.bytes()
		}},
		{"malformed_line_header", "none", MalformedLine, func(t *testing.T) []byte {
			return dev(t).open().intent("call-1", pre(del(schemas.FieldSeq))).close().bytes()
		}},
		{"malformed_line_not_object", "none", MalformedLine, func(t *testing.T) []byte {
			return dev(t).open().raw(`["open"]`).close().bytes()
		}},
		{"untrusted_key", "other", UntrustedKey, func(t *testing.T) []byte { return goodSession(dev(t)).bytes() }},
		{"untrusted_key_empty_trust_store", "empty", UntrustedKey, func(t *testing.T) []byte {
			return goodSession(dev(t)).bytes()
		}},
		// A rotated second session whose key is not pinned.
		{"untrusted_key_second_session", "dev", UntrustedKey, func(t *testing.T) []byte {
			w := goodSession(dev(t))
			w.key = otherKey()
			return goodSession(w).bytes()
		}},
		{"duplicate_decision", "none", DuplicateDecision, func(t *testing.T) []byte {
			return dev(t).open().decision("apr-gate-echo-1").decision("apr-gate-echo-1").close().bytes()
		}},

		// Indeterminate.
		{"unknown_line_type", "none", UnknownLineType, func(t *testing.T) []byte {
			w := dev(t).open()
			w.add(schemas.NewLine("heartbeat"))
			return w.close().bytes()
		}},
		// A line of a type this verifier does not know, validly signed by
		// the session's key: the signature says who wrote it, not what it
		// claims, so it caps the verdict like an unsigned one.
		{"unknown_line_type_signed", "dev", UnknownLineType, func(t *testing.T) []byte {
			w := dev(t).open().intent("call-1").outcome("call-1")
			w.add(schemas.NewLine("grant"), pre(set("scope", "all tools, forever")), signed())
			return w.close().bytes()
		}},
		{"reserved_checkpoint", "none", ReservedCheckpoint, func(t *testing.T) []byte {
			w := dev(t).open()
			w.add(schemas.NewLine(schemas.LineCheckpoint))
			return w.close().bytes()
		}},
		{"torn_final_line", "none", TornFinalLine, func(t *testing.T) []byte {
			w := goodSession(dev(t))
			n := len(w.lines) - 1
			w.lines[n] = w.lines[n][:len(w.lines[n])-40]
			return w.bytes()
		}},
		{"unanchored_tail", "none", UnanchoredTail, func(t *testing.T) []byte {
			return dev(t).open().intent("call-1").outcome("call-1").intent("call-2").intent("call-3").bytes()
		}},
		{"missing_line", "none", MissingLine, func(t *testing.T) []byte {
			w := dev(t).open().intent("call-1")
			return w.outcome("call-1", pre(set(schemas.FieldSeq, 3))).close().bytes()
		}},
		{"empty_chain", "none", EmptyChain, func(t *testing.T) []byte { return []byte("\n\n") }},

		// A salvage export of a damaged state directory: lines 2-3 of a
		// session were lost and a gap line marks where. Without
		// --allow-gaps that is lines dropped: Tampered.
		{"record_gap_not_allowed", "dev", ChainBroken, func(t *testing.T) []byte {
			return goodSession(dev(t)).salvaged(2, 4).bytes()
		}},
		// With it, never Verified; the rest is still checked.
		{"record_gap", "dev+gaps", RecordGap, func(t *testing.T) []byte {
			return goodSession(dev(t)).salvaged(2, 4).bytes()
		}},
		// The gap took the end of one session and the open of the next:
		// the next session's lines cannot be checked until its successor
		// opens, and that open is linked to the line before it as usual.
		{"record_gap_lost_open", "dev+gaps", RecordGap, func(t *testing.T) []byte {
			w := goodSession(goodSession(goodSession(dev(t))))
			return w.salvaged(5, 8).bytes()
		}},
		// A gap hides nothing after it: an edit past the gap is Tampered.
		{"record_gap_then_tampered", "dev+gaps", ChainBroken, func(t *testing.T) []byte {
			return goodSession(goodSession(dev(t))).salvaged(2, 4).edit(7, set("tool_id", "rm-rf")).bytes()
		}},
		// Nor before it.
		{"record_gap_after_tampered", "dev+gaps", BadSignature, func(t *testing.T) []byte {
			return goodSession(goodSession(dev(t))).edit(2, set("tool_id", "exfiltrate")).salvaged(4, 6).bytes()
		}},
	}
}

// goodSessionOpenedWith appends a good session whose open is bent by opt.
func goodSessionOpenedWith(w *testWriter, opt lineOpt) *testWriter {
	return w.open(opt).intent("call-1").outcome("call-1").close()
}

func pinOptions(t *testing.T, pin string) Options {
	if p, ok := strings.CutSuffix(pin, "+gaps"); ok {
		o := pinOptions(t, p)
		o.AllowGaps = true
		return o
	}
	t.Helper()
	switch pin {
	case "none":
		return Options{}
	case "dev":
		return Options{Keys: []ed25519.PublicKey{pubOf(devKey())}}
	case "other":
		return Options{Keys: []ed25519.PublicKey{pubOf(otherKey())}}
	case "empty":
		return Options{TrustStore: &TrustStore{}}
	case "dev,other":
		return Options{TrustStore: &TrustStore{Keys: []ed25519.PublicKey{pubOf(devKey()), pubOf(otherKey())}}}
	}
	t.Fatalf("unknown pin %q", pin)
	return Options{}
}

// want is the parsed <case>.want file:
//
//	pin: <none|dev|other|empty|dev,other>
//	exit: <n>
//	<blank line>
//	<expected stdout>
type want struct {
	pin    string
	exit   int
	stdout string
}

func parseWant(b []byte) (want, error) {
	head, body, ok := bytes.Cut(b, []byte("\n\n"))
	if !ok {
		return want{}, fmt.Errorf("no blank line after the header")
	}
	var w want
	seen := map[string]bool{}
	for _, line := range strings.Split(string(head), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			return want{}, fmt.Errorf("header line %q is not key: value", line)
		}
		if seen[k] {
			return want{}, fmt.Errorf("header key %q repeated", k)
		}
		seen[k] = true
		switch k {
		case "pin":
			w.pin = v
		case "exit":
			n, err := strconv.Atoi(v)
			if err != nil {
				return want{}, fmt.Errorf("exit %q: %v", v, err)
			}
			w.exit = n
		default:
			return want{}, fmt.Errorf("unknown header key %q", k)
		}
	}
	if !seen["pin"] || !seen["exit"] {
		return want{}, fmt.Errorf("header needs pin and exit")
	}
	w.stdout = string(body)
	return w, nil
}

func formatWant(w want) []byte {
	return []byte(fmt.Sprintf("pin: %s\nexit: %d\n\n%s", w.pin, w.exit, w.stdout))
}

// TestCorpus checks every record in testdata/corpus against its .want file
// and against the case table, and that the committed records are the ones
// the table builds. Run with -update to rewrite the files.
func TestCorpus(t *testing.T) {
	cases := corpusCases()
	if *update {
		if err := os.MkdirAll(corpusDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			record := tc.build(t)
			opts := pinOptions(t, tc.pin)
			res := Verify(bytes.NewReader(record), opts)
			got := want{pin: tc.pin, exit: ExitCode(res), stdout: Render(res)}
			aarl := filepath.Join(corpusDir, tc.name+".aarl")
			wantPath := filepath.Join(corpusDir, tc.name+".want")
			if *update {
				if err := os.WriteFile(aarl, record, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(wantPath, formatWant(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}

			wantVerdict, wantExit := Verified, 0
			if tc.want != "" {
				wantVerdict = tc.want.Verdict()
				wantExit = map[Verdict]int{Tampered: 1, Indeterminate: 3}[wantVerdict]
			}
			if res.Verdict != wantVerdict {
				t.Fatalf("Verify = %v (%v), want %v %s", res.Verdict, res.Reason, wantVerdict, tc.want)
			}
			if tc.want != "" && (res.Reason == nil || res.Reason.Code != tc.want) {
				t.Fatalf("Verify reason = %+v, want %s", res.Reason, tc.want)
			}
			if got.exit != wantExit {
				t.Fatalf("ExitCode = %d, want %d", got.exit, wantExit)
			}

			committed, err := os.ReadFile(aarl)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(committed, record) {
				t.Fatalf("%s differs from what the case builds (run go test -update)", aarl)
			}
			wb, err := os.ReadFile(wantPath)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			w, err := parseWant(wb)
			if err != nil {
				t.Fatalf("%s: %v", wantPath, err)
			}
			// Verify the committed file with the committed options, as a
			// foreign implementation would use the corpus.
			res = Verify(bytes.NewReader(committed), pinOptions(t, w.pin))
			if got := Render(res); got != w.stdout {
				t.Errorf("Render =\n%s\nwant\n%s", got, w.stdout)
			}
			if got := ExitCode(res); got != w.exit {
				t.Errorf("ExitCode = %d, want %d", got, w.exit)
			}
		})
	}
}

// TestCorpusCoversEveryReason fails when a reason has no record in the
// corpus, or when the corpus holds a file that no case builds. The corpus
// holds single records; the reasons that only a checkpoint leads to are
// covered by TestRotatedSetAttacks instead.
func TestCorpusCoversEveryReason(t *testing.T) {
	// Checkpoints and proofs are files beside a record, not records: the
	// rotated, prefix and proof tests cover their reasons.
	covered := map[Code]bool{CheckpointMismatch: true, BadCheckpoint: true, BadProof: true}
	names := map[string]bool{}
	for _, tc := range corpusCases() {
		covered[tc.want] = true
		names[tc.name] = true
	}
	for _, c := range Codes() {
		if !covered[c] {
			t.Errorf("no corpus case for %s", c)
		}
	}
	if !covered[""] {
		t.Error("no Verified corpus case")
	}
	files, err := filepath.Glob(filepath.Join(corpusDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		name := strings.TrimSuffix(strings.TrimSuffix(base, ".aarl"), ".want")
		if !names[name] || !(strings.HasSuffix(base, ".aarl") || strings.HasSuffix(base, ".want")) {
			t.Errorf("%s is not built by any corpus case", f)
		}
	}
	if got, want := len(files), 2*len(corpusCases()); got != want && !*update {
		t.Errorf("corpus holds %d files, want %d", got, want)
	}
}
