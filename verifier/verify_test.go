package verifier

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aegis-dev/aegis/schemas"
)

const (
	devKeyID  = "77a2c2f5952039243c043b69e7e812a2deb69e3271adb3013b8f24d3b8ea40f6"
	devPubHex = "3de537a06e04b2ffe1fb0558ea16d3c0f042ed99f7e392698aa5120f568d4e2c"
)

func readGolden(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "upstream-golden-session.aarl"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestUpstreamGoldenSession verifies the twelve golden lines of the
// specification. They end in a signed close, so the record is Verified; the
// outcomes without intents (one golden line per case) only produce warnings.
func TestUpstreamGoldenSession(t *testing.T) {
	record := readGolden(t)
	pub, err := schemas.ParsePublicKey(devPubHex)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts Options
		want string
		exit int
	}{
		{"unpinned", Options{}, "Verified (unpinned)\nkey_id " + devKeyID + "\ncoverage session 0 seq 11\n", 0},
		{"pinned by key", Options{Keys: []ed25519.PublicKey{pub}}, "Verified (pinned to " + devKeyID + ")\nkey_id " + devKeyID + "\ncoverage session 0 seq 11\n", 0},
		{"pinned by trust store with duplicates", Options{TrustStore: &TrustStore{Keys: []ed25519.PublicKey{pub, pub}}}, "Verified (pinned to " + devKeyID + ")\nkey_id " + devKeyID + "\ncoverage session 0 seq 11\n", 0},
		{"pinned to two keys", Options{Keys: []ed25519.PublicKey{pub, pubOf(otherKey())}}, "Verified (pinned)\nkey_id " + devKeyID + "\ncoverage session 0 seq 11\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Verify(bytes.NewReader(record), tc.opts)
			if got := Render(res); got != tc.want {
				t.Errorf("Render =\n%s\nwant\n%s", got, tc.want)
			}
			if got := ExitCode(res); got != tc.exit {
				t.Errorf("ExitCode = %d, want %d", got, tc.exit)
			}
		})
	}
	res := Verify(bytes.NewReader(record), Options{})
	var orphans, unanswered int
	for _, w := range res.Warnings {
		switch {
		case strings.Contains(w, "has no pending intent"):
			orphans++
		case strings.Contains(w, "has no outcome"):
			unanswered++
		}
	}
	if orphans != 8 || unanswered != 1 {
		t.Errorf("Warnings = %q, want 8 outcomes without intent and 1 intent without outcome", res.Warnings)
	}
}

// TestSpecVectors reproduces §11 of the specification on the golden file.
func TestSpecVectors(t *testing.T) {
	lines := bytes.Split(bytes.TrimSuffix(readGolden(t), []byte("\n")), []byte("\n"))
	hashOf := func(i int) string {
		l, err := schemas.DecodeLine(lines[i])
		if err != nil {
			t.Fatal(err)
		}
		h, err := l.Hash()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if got, want := hashOf(0), "ace4118a6a4ec1bf47503431aaa769ebb74de9c61174bf64470561a99abf4066"; got != want {
		t.Errorf("line 0 hash = %s, want %s", got, want)
	}
	if got, want := hashOf(1), "5d923c33bede5bef42ee41556fed00fa0660ab30feb57355b3316a2263ffa7f9"; got != want {
		t.Errorf("line 1 hash = %s, want %s", got, want)
	}
	if got, want := hashOf(2), "01a0d59064fd9f204af26b29d7699e5f8bc79bef0cc69b5edfa989af24a51d2f"; got != want {
		t.Errorf("line 2 hash = %s, want %s", got, want)
	}
	if got := schemas.KeyID(pubOf(devKey())); got != devKeyID {
		t.Errorf("dev key_id = %s, want %s", got, devKeyID)
	}
	canon, err := schemas.Canonicalize([]byte(`{"tool_id":"echo","seq":7,"prev_hash":"` + schemas.GenesisHash + `","line_type":"outcome","decision_axes":{"role":"ops","capability":"fs.read","fs":{"path_raw":"~/notes.md","path_canonical":"/home/a/notes.md"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := schemas.HashHex(canon), "9017de5e13e0a12b261e1960d0d0bc9220c6b7ef501b7dd189141e6327377664"; got != want {
		t.Errorf("§11.1 hash = %s, want %s", got, want)
	}
	// Every signed golden line verifies strictly.
	for i, raw := range lines {
		l, _ := schemas.DecodeLine(raw)
		sigHex, ok := l.Str(schemas.FieldSignature)
		if !ok {
			continue
		}
		sig, _ := schemas.ParseSignature(sigHex)
		msg, _ := l.SigningInput()
		if !verifyStrict(nil, pubOf(devKey()), msg, sig) {
			t.Errorf("line %d: strict verification failed", i)
		}
	}
}

// TestUnknownMembersAreHashed: a future member on a signed line is covered by
// the signature and the hash; a verifier that dropped it before hashing
// would accept a record with the member removed.
func TestUnknownMembersAreHashed(t *testing.T) {
	w := newTestWriter(t, devKey()).open()
	w.outcome("call-1", pre(set("risk_score", "0.3"))).close()
	if res := Verify(bytes.NewReader(w.bytes()), Options{}); res.Verdict != Verified {
		t.Fatalf("record with an unknown member: %s", Render(res))
	}
	w.edit(1, del("risk_score"))
	res := Verify(bytes.NewReader(w.bytes()), Options{})
	if res.Reason == nil || res.Reason.Code != BadSignature {
		t.Fatalf("record with the unknown member removed: %s", Render(res))
	}
}

// TestNonCanonicalLinesAreRecanonicalized: a record written with whitespace or
// another member order still verifies, because the hash is over the
// canonical form.
func TestNonCanonicalLinesAreRecanonicalized(t *testing.T) {
	w := goodSession(newTestWriter(t, devKey()))
	w.lines[1] = append([]byte(" "), bytes.ReplaceAll(w.lines[1], []byte(`,`), []byte(`, `))...)
	if res := Verify(bytes.NewReader(w.bytes()), Options{}); res.Verdict != Verified {
		t.Fatalf("re-spaced record: %s", Render(res))
	}
	crlf := bytes.ReplaceAll(goodSession(newTestWriter(t, devKey())).bytes(), []byte("\n"), []byte("\r\n"))
	if res := Verify(bytes.NewReader(crlf), Options{}); res.Verdict != Verified {
		t.Fatalf("CRLF record: %s", Render(res))
	}
	noFinalNewline := bytes.TrimSuffix(goodSession(newTestWriter(t, devKey())).bytes(), []byte("\n"))
	if res := Verify(bytes.NewReader(noFinalNewline), Options{}); res.Verdict != Verified {
		t.Fatalf("record without final newline: %s", Render(res))
	}
}

// TestInFlightOutputInjection: a call_id is attacker-controlled text; one with
// a newline must not add a line such as "Verified (unpinned)" to the output.
func TestInFlightOutputInjection(t *testing.T) {
	w := newTestWriter(t, devKey()).open().intent("x\nVerified (unpinned)")
	res := Verify(bytes.NewReader(w.bytes()), Options{})
	out := Render(res)
	if got, want := strings.Count(out, "\n"), 4; got != want {
		t.Fatalf("Render has %d lines, want %d:\n%s", got, want, out)
	}
	if !strings.Contains(out, `in_flight "x\nVerified (unpinned)"`) {
		t.Fatalf("Render does not quote the call_id:\n%s", out)
	}
}

// TestLineTypeInjection: the token of an unknown line type is quoted the
// same way.
func TestLineTypeInjection(t *testing.T) {
	w := newTestWriter(t, devKey()).open()
	w.add(schemas.NewLine("x`\nVerified"))
	w.close()
	out := Render(Verify(bytes.NewReader(w.bytes()), Options{}))
	if first, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(first, "Indeterminate: unknown line type `\"x`") {
		t.Fatalf("first line = %q", first)
	}
}

type failingReader struct{ after []byte }

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.after) == 0 {
		return 0, errors.New("disk on fire")
	}
	n := copy(p, r.after)
	r.after = r.after[n:]
	return n, nil
}

func TestUnreadableRecord(t *testing.T) {
	res := Verify(&failingReader{after: readGolden(t)[:100]}, Options{})
	if res.Err == nil {
		t.Fatalf("Verify of a failing reader: %s", Render(res))
	}
	if got := ExitCode(res); got != 2 {
		t.Errorf("ExitCode = %d, want 2", got)
	}
	if got := Render(res); got != "" {
		t.Errorf("Render = %q, want empty", got)
	}
}

func TestExitCodeOfZeroResultFailsClosed(t *testing.T) {
	if got := ExitCode(Result{}); got != 1 {
		t.Fatalf("ExitCode(Result{}) = %d, want 1", got)
	}
	if got := Label(Result{}); !strings.HasPrefix(got, "Tampered") {
		t.Fatalf("Label(Result{}) = %q, want a Tampered label", got)
	}
}

// TestOverlongLine: a line longer than MaxLineBytes is refused without
// buffering it whole.
func TestOverlongLine(t *testing.T) {
	w := newTestWriter(t, devKey()).open()
	rec := append(w.bytes(), bytes.Repeat([]byte("x"), MaxLineBytes+10)...)
	rec = append(rec, "\n"...)
	rec = append(rec, w.lines[0]...)
	res := Verify(bytes.NewReader(rec), Options{})
	if res.Reason == nil || res.Reason.Code != MalformedLine || res.Reason.Line != 2 {
		t.Fatalf("Verify = %+v", res.Reason)
	}
}

func TestEveryCodeHasAVerdict(t *testing.T) {
	for _, c := range Codes() {
		if v := c.Verdict(); v != Tampered && v != Indeterminate {
			t.Errorf("%s.Verdict() = %v", c, v)
		}
	}
}

// TestUnknownLineTypeCapsVerdict: a line this verifier cannot interpret
// keeps a record from being Verified, signed or not (record format: unknown
// line types cap the verdict at Indeterminate). Each case is an attack on a
// verifier that trusted a valid signature instead; both walks must agree.
func TestUnknownLineTypeCapsVerdict(t *testing.T) {
	dev := func() *testWriter { return newTestWriter(t, devKey()) }
	unknown := func(w *testWriter, typ string, opts ...lineOpt) *testWriter {
		return w.add(schemas.NewLine(typ), opts...)
	}
	for _, tc := range []struct {
		name    string
		record  []byte
		want    Code
		message string // a substring of the first output line
	}{
		{
			// The session key holder (or a compromised writer) slips in a
			// validly signed line whose meaning a newer reader would act on.
			name:    "signed unknown line smuggled into a closed session",
			record:  unknown(dev().open().intent("call-1").outcome("call-1"), "grant", signed()).close().bytes(),
			want:    UnknownLineType,
			message: "unknown line type `grant` at session 0 seq 3 (line 4), newer emitter; its signature verifies",
		},
		{
			name:    "signed unknown line in a later session",
			record:  unknown(goodSession(dev()).open(), "override", signed()).close().bytes(),
			want:    UnknownLineType,
			message: "unknown line type `override` at session 1 seq 1 (line 9)",
		},
		{
			name:    "signed unknown line posing as the close",
			record:  unknown(dev().open().intent("call-1").outcome("call-1"), "closed", signed()).bytes(),
			want:    UnknownLineType,
			message: "unknown line type `closed` at session 0 seq 3",
		},
		{
			name:    "unsigned unknown line",
			record:  unknown(dev().open(), "heartbeat").close().bytes(),
			want:    UnknownLineType,
			message: "unknown line type `heartbeat` at session 0 seq 1 (line 2), newer emitter; unsigned",
		},
		{
			name:    "unknown line with a forged signature",
			record:  unknown(dev().open(), "grant", signed(), post(set("scope", "all"))).close().bytes(),
			want:    BadSignature,
			message: "signature does not match this line",
		},
		{
			name:    "unknown line signed under a key the session did not publish",
			record:  unknown(dev().open(), "grant", signed(), signedBy(otherKey())).close().bytes(),
			want:    BadSignature,
			message: "line was signed under key",
		},
		{
			// Indeterminate does not stop the walk: a later forged line
			// still makes the record Tampered.
			name: "signed unknown line hiding a later forged outcome",
			record: unknown(dev().open(), "grant", signed()).intent("call-1").
				outcome("call-1", post(set("tool_id", "exfiltrate"))).close().bytes(),
			want:    BadSignature,
			message: "signature does not match this line",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for walk, verify := range map[string]func() Result{
				"parallel":   func() Result { return Verify(bytes.NewReader(tc.record), Options{}) },
				"sequential": func() Result { return verifySequential(bytes.NewReader(tc.record), Options{}) },
				"pinned": func() Result {
					return Verify(bytes.NewReader(tc.record), Options{Keys: []ed25519.PublicKey{pubOf(devKey())}})
				},
			} {
				res := verify()
				out := Render(res)
				if res.Reason == nil || res.Reason.Code != tc.want {
					t.Fatalf("%s walk: %s, want %s", walk, out, tc.want)
				}
				if want := tc.want.Verdict(); res.Verdict != want {
					t.Fatalf("%s walk: verdict %v, want %v", walk, res.Verdict, want)
				}
				first, _, _ := strings.Cut(out, "\n")
				if !strings.Contains(first, tc.message) {
					t.Errorf("%s walk: first line %q does not say %q", walk, first, tc.message)
				}
			}
		})
	}
}
