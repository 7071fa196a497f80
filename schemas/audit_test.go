package schemas

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func auditGoldenLines(t *testing.T) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "audit", "upstream-golden-session.aarl"))
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	for line := range bytes.Lines(b) {
		lines = append(lines, bytes.TrimSuffix(line, []byte("\n")))
	}
	if len(lines) != 12 {
		t.Fatalf("golden session has %d lines, want 12", len(lines))
	}
	return lines
}

func TestConstants(t *testing.T) {
	if got, want := HashHex([]byte("aegis-wrap-passthrough-v0")), WrapPassthroughPolicySetHash; got != want {
		t.Errorf("SHA-256(aegis-wrap-passthrough-v0) = %s, want %s", got, want)
	}
	if got := len(InsecureDevKeySeed); got != ed25519.SeedSize {
		t.Errorf("len(InsecureDevKeySeed) = %d, want %d", got, ed25519.SeedSize)
	}
	pub := ed25519.NewKeyFromSeed([]byte(InsecureDevKeySeed)).Public().(ed25519.PublicKey)
	if got, want := KeyID(pub), "77a2c2f5952039243c043b69e7e812a2deb69e3271adb3013b8f24d3b8ea40f6"; got != want {
		t.Errorf("KeyID(dev key) = %s, want %s", got, want)
	}
	if got, want := PublicKeyHex(pub), "3de537a06e04b2ffe1fb0558ea16d3c0f042ed99f7e392698aa5120f568d4e2c"; got != want {
		t.Errorf("dev public key = %s, want %s", got, want)
	}
	if !IsDigest(GenesisHash) || strings.Trim(GenesisHash, "0") != "" {
		t.Errorf("GenesisHash = %q, want 64 zeros", GenesisHash)
	}
}

// TestGoldenLinesAreCanonical checks that the upstream vectors are written in
// canonical form and that their hashes chain, which pins both the
// canonicalizer and Line.Hash to the specification.
func TestGoldenLinesAreCanonical(t *testing.T) {
	prev := GenesisHash
	for i, raw := range auditGoldenLines(t) {
		got, err := Canonicalize(raw)
		if err != nil {
			t.Fatalf("line %d: Canonicalize: %v", i, err)
		}
		if !bytes.Equal(got, raw) {
			t.Fatalf("line %d: Canonicalize = %s\nwant %s", i, got, raw)
		}
		l, err := DecodeLine(raw)
		if err != nil {
			t.Fatalf("line %d: DecodeLine: %v", i, err)
		}
		h, err := l.Header()
		if err != nil {
			t.Fatalf("line %d: Header: %v", i, err)
		}
		if h.Seq != uint64(i) || h.PrevHash != prev {
			t.Fatalf("line %d: seq %d prev_hash %s, want seq %d prev_hash %s", i, h.Seq, h.PrevHash, i, prev)
		}
		if prev, err = l.Hash(); err != nil {
			t.Fatalf("line %d: Hash: %v", i, err)
		}
		switch i {
		case 0:
			if want := "ace4118a6a4ec1bf47503431aaa769ebb74de9c61174bf64470561a99abf4066"; prev != want {
				t.Errorf("line 0 hash = %s, want %s", prev, want)
			}
		case 1:
			if want := "5d923c33bede5bef42ee41556fed00fa0660ab30feb57355b3316a2263ffa7f9"; prev != want {
				t.Errorf("line 1 hash = %s, want %s", prev, want)
			}
		}
	}
}

// TestGoldenSignaturesVerify checks SigningInput against the upstream
// signatures: the signed bytes are the canonical line without signature but
// with key_id.
func TestGoldenSignaturesVerify(t *testing.T) {
	pub := ed25519.NewKeyFromSeed([]byte(InsecureDevKeySeed)).Public().(ed25519.PublicKey)
	for i, raw := range auditGoldenLines(t) {
		l, err := DecodeLine(raw)
		if err != nil {
			t.Fatal(err)
		}
		sigHex, ok := l.Str(FieldSignature)
		if Signed(l.Type()) != ok {
			t.Fatalf("line %d (%s): has signature %v, want %v", i, l.Type(), ok, Signed(l.Type()))
		}
		if !ok {
			continue
		}
		sig, ok := ParseSignature(sigHex)
		if !ok {
			t.Fatalf("line %d: ParseSignature(%q) failed", i, sigHex)
		}
		msg, err := l.SigningInput()
		if err != nil {
			t.Fatal(err)
		}
		if !ed25519.Verify(pub, msg, sig) {
			t.Errorf("line %d: signature does not verify over %s", i, msg)
		}
	}
}

// TestGoldenPayloadsRoundTrip decodes the payload of every golden line into
// its Go type, strictly, and rebuilds the line: the typed builders must write
// exactly the members upstream writes, no more, no fewer.
func TestGoldenPayloadsRoundTrip(t *testing.T) {
	for i, raw := range auditGoldenLines(t) {
		l, err := DecodeLine(raw)
		if err != nil {
			t.Fatal(err)
		}
		payload := l.Clone()
		for _, name := range []string{FieldSchemaVersion, FieldLineType, FieldSeq, FieldPrevHash, FieldSignature, FieldKeyID} {
			payload.Delete(name)
		}
		pj, err := EncodeValue(payload.m)
		if err != nil {
			t.Fatal(err)
		}
		var rebuilt Line
		switch l.Type() {
		case LineOpen:
			var p Open
			strictUnmarshal(t, pj, &p)
			rebuilt, err = p.Line()
		case LineIntent:
			var p Intent
			strictUnmarshal(t, pj, &p)
			rebuilt, err = p.Line()
		case LineOutcome:
			var p Outcome
			strictUnmarshal(t, pj, &p)
			rebuilt, err = p.Line()
		case LineDecision:
			var p Decision
			strictUnmarshal(t, pj, &p)
			rebuilt, err = p.Line()
		case LineClose:
			rebuilt = CloseLine()
		default:
			t.Fatalf("line %d: unexpected type %q", i, l.Type())
		}
		if err != nil {
			t.Fatalf("line %d: rebuild: %v", i, err)
		}
		payload.m[FieldSchemaVersion] = uint64(AuditSchemaVersion)
		payload.m[FieldLineType] = l.Type()
		want, _ := payload.Canonical()
		got, err := rebuilt.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("line %d rebuilt = %s\nwant %s", i, got, want)
		}
	}
}

func strictUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s into %T: %v", b, v, err)
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestWrapOutcomes pins the exact outcome of each path a relayed call can
// take; a drift here changes what every recheck reads from old records.
func TestWrapOutcomes(t *testing.T) {
	req, resp := sha("request"), sha("response")
	c := WrapCall{CallID: CallID(3), ToolID: "echo", RequestDigest: req, PolicySetHash: WrapPassthroughPolicySetHash}
	head := `"call_id":"call-3",`
	seedCap := `"capability":{"reason":"not evaluated","status":"denied"},`
	for _, tc := range []struct {
		name string
		got  Outcome
		want string
	}{
		{
			"relayed call answered",
			c.Answered(resp, 12),
			`{` + head + `"capability":{"grant":{"grant_id":"wrap-passthrough-call-3","max_memory_bytes":0,"max_output_bytes":0,"max_wall_ms":0,"tool_id":"echo"},"status":"granted"},"decision_axes":{},"execution":{"status":"success"},"grant_id":"wrap-passthrough-call-3","line_type":"outcome","peak_memory_bytes":0,"policy":{"status":"allowed"},"policy_set_hash":"` + WrapPassthroughPolicySetHash + `","request_digest":"` + req + `","response_digest":"` + resp + `","schema_version":2,"tool_id":"echo","wall_ms":12}`,
		},
		{
			"child exited before responding",
			c.ChildExited(),
			`{` + head + seedCap + `"decision_axes":{},"execution":{"reason":"child exited before responding","status":"host_denied"},"line_type":"outcome","policy":{"reason":"not evaluated","status":"denied"},"policy_set_hash":"` + WrapPassthroughPolicySetHash + `","request_digest":"` + req + `","schema_version":2,"tool_id":"echo"}`,
		},
		{
			"client closed stdin grace",
			c.ClientClosed(),
			`{` + head + seedCap + `"decision_axes":{},"execution":{"reason":"client closed stdin; child did not answer within the shutdown grace","status":"host_denied"},"line_type":"outcome","policy":{"reason":"not evaluated","status":"denied"},"policy_set_hash":"` + WrapPassthroughPolicySetHash + `","request_digest":"` + req + `","schema_version":2,"tool_id":"echo"}`,
		},
		{
			"child stopped by aegis",
			c.Stopped(ReasonChildFrameTooLarge),
			`{` + head + seedCap + `"decision_axes":{},"execution":{"reason":"child sent a frame larger than the 16 MiB frame limit; aegis stopped the child before it responded","status":"host_denied"},"line_type":"outcome","policy":{"reason":"not evaluated","status":"denied"},"policy_set_hash":"` + WrapPassthroughPolicySetHash + `","request_digest":"` + req + `","schema_version":2,"tool_id":"echo"}`,
		},
		{
			"malformed tools/call",
			MalformedCall("call-3", req).Malformed(),
			`{` + head + `"capability":{"reason":"tools/call without a string params.name","status":"denied"},"decision_axes":{},"execution":{"reason":"not executed","status":"host_denied"},"line_type":"outcome","policy":{"reason":"tools/call without a string params.name","status":"denied"},"policy_set_hash":"` + WrapPassthroughPolicySetHash + `","request_digest":"` + req + `","schema_version":2,"tool_id":"<unknown>"}`,
		},
		{
			"refused by gate",
			WrapCall{CallID: "call-3", ToolID: "echo", RequestDigest: req, PolicySetHash: sha("policy")}.Refused(PolicyRateLimited("rate limit exceeded"), "rate-echo"),
			`{` + head + `"capability":{"reason":"policy blocked before capability","status":"denied"},"decision_axes":{"matched_rule":"rate-echo"},"execution":{"reason":"not executed","status":"host_denied"},"line_type":"outcome","policy":{"reason":"rate limit exceeded","status":"rate_limited"},"policy_set_hash":"` + sha("policy") + `","request_digest":"` + req + `","schema_version":2,"tool_id":"echo"}`,
		},
		{
			"refused pending approval",
			c.Refused(PolicyPendingApproval("apr-gate-echo-1"), "gate"),
			`{` + head + `"capability":{"reason":"policy blocked before capability","status":"denied"},"decision_axes":{"matched_rule":"gate"},"execution":{"reason":"not executed","status":"host_denied"},"line_type":"outcome","policy":{"approval_id":"apr-gate-echo-1","status":"pending_approval"},"policy_set_hash":"` + WrapPassthroughPolicySetHash + `","request_digest":"` + req + `","schema_version":2,"tool_id":"echo"}`,
		},
		{
			"allowed sibling in refused batch",
			c.SiblingRefused(),
			`{` + head + seedCap + `"decision_axes":{},"execution":{"reason":"not executed: sibling call in this batch was refused","status":"host_denied"},"line_type":"outcome","policy":{"status":"allowed"},"policy_set_hash":"` + WrapPassthroughPolicySetHash + `","request_digest":"` + req + `","schema_version":2,"tool_id":"echo"}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.got.Line()
			if err != nil {
				t.Fatalf("Line: %v", err)
			}
			got, err := l.Canonical()
			if err != nil {
				t.Fatal(err)
			}
			want, err := Canonicalize([]byte(tc.want))
			if err != nil {
				t.Fatalf("bad want %s: %v", tc.want, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
	if got, want := c.Intent(), (Intent{CallID: "call-3", ToolID: "echo", RequestDigest: req}); got != want {
		t.Errorf("Intent() = %+v, want %+v", got, want)
	}
}

// TestTaggedPayloadsRefuseUnknownStatus stops a typo in a status from
// producing a line that no verifier or recheck understands.
func TestTaggedPayloadsRefuseUnknownStatus(t *testing.T) {
	o := WrapCall{CallID: "call-1", ToolID: "t", RequestDigest: GenesisHash, PolicySetHash: GenesisHash}.Seed()
	for _, tc := range []struct {
		name string
		o    Outcome
	}{
		{"policy", func() Outcome { x := o; x.Policy.Status = "allow"; return x }()},
		{"capability", func() Outcome { x := o; x.Capability.Status = "ok"; return x }()},
		{"granted without grant", func() Outcome { x := o; x.Capability = Capability{Status: StatusGranted}; return x }()},
		{"execution", func() Outcome { x := o; x.Execution.Status = "done"; return x }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.o.Line(); err == nil {
				t.Fatalf("Line() of %+v succeeded, want error", tc.o)
			}
		})
	}
	if _, err := (Decision{ApprovalID: "a", Verdict: ApprovalVerdict{Verdict: "maybe"}}).Line(); err == nil {
		t.Fatalf("decision with verdict maybe succeeded, want error")
	}
}

func TestDecisionLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Decision
		want string
	}{
		{"approved with empty write list", Decision{ApprovalID: "apr-1", Verdict: Approved(ApprovalScope{ToolID: "dream", FS: &FSGrant{ReadPaths: []string{"/f"}}})},
			`{"approval_id":"apr-1","line_type":"decision","schema_version":2,"verdict":{"scope":{"fs":{"read_paths":["/f"],"write_paths":[]},"tool_id":"dream"},"verdict":"approved"}}`},
		{"denied", Decision{ApprovalID: "apr-2", Verdict: Rejected("not today")},
			`{"approval_id":"apr-2","line_type":"decision","schema_version":2,"verdict":{"reason":"not today","verdict":"denied"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.d.Line()
			if err != nil {
				t.Fatal(err)
			}
			got, _ := l.Canonical()
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestHeaderRefusesMistypedFields: a header member that is missing or of the
// wrong type must not be read as a default (seq 0, empty type), or a forged
// line could pass as the start of a session.
func TestHeaderRefusesMistypedFields(t *testing.T) {
	good := `"line_type":"close","prev_hash":"` + GenesisHash + `","schema_version":2,"seq":3`
	if l, err := DecodeLine([]byte(`{` + good + `}`)); err != nil {
		t.Fatal(err)
	} else if h, err := l.Header(); err != nil || h != (Header{2, "close", 3, GenesisHash}) {
		t.Fatalf("Header() = %+v, %v", h, err)
	}
	for _, tc := range []struct{ name, line string }{
		{"missing schema_version", `{"line_type":"close","prev_hash":"` + GenesisHash + `","seq":3}`},
		{"schema_version 1", `{"line_type":"close","prev_hash":"` + GenesisHash + `","schema_version":1,"seq":3}`},
		{"schema_version string", `{"line_type":"close","prev_hash":"` + GenesisHash + `","schema_version":"2","seq":3}`},
		{"missing line_type", `{"prev_hash":"` + GenesisHash + `","schema_version":2,"seq":3}`},
		{"line_type number", `{"line_type":1,"prev_hash":"` + GenesisHash + `","schema_version":2,"seq":3}`},
		{"missing seq", `{"line_type":"close","prev_hash":"` + GenesisHash + `","schema_version":2}`},
		{"seq string", `{"line_type":"close","prev_hash":"` + GenesisHash + `","schema_version":2,"seq":"3"}`},
		{"missing prev_hash", `{"line_type":"close","schema_version":2,"seq":3}`},
		{"uppercase prev_hash", `{"line_type":"close","prev_hash":"` + strings.ToUpper(sha("x")) + `","schema_version":2,"seq":3}`},
		{"short prev_hash", `{"line_type":"close","prev_hash":"00","schema_version":2,"seq":3}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := DecodeLine([]byte(tc.line))
			if err != nil {
				t.Fatal(err)
			}
			if h, err := l.Header(); err == nil {
				t.Fatalf("Header() of %s = %+v, want error", tc.line, h)
			}
		})
	}
	if _, err := DecodeLine([]byte(`[1]`)); err == nil {
		t.Fatal("DecodeLine([1]) succeeded, want error")
	}
}

func TestLineKeepsUnknownMembers(t *testing.T) {
	raw := `{"future":{"x":[1,"y"]},"line_type":"intent","prev_hash":"` + GenesisHash + `","schema_version":2,"seq":1}`
	l, err := DecodeLine([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Canonical()
	if err != nil || string(got) != raw {
		t.Fatalf("Canonical() = %s, %v; want %s", got, err, raw)
	}
	c := l.Clone()
	if err := c.Set("future", "changed"); err != nil {
		t.Fatal(err)
	}
	if v, _ := l.Get("future"); v == "changed" {
		t.Fatal("Clone shares members with the original")
	}
	if err := c.Set("bad", -1); err == nil {
		t.Fatal("Set(-1) succeeded, want error")
	}
}

func TestParsePublicKey(t *testing.T) {
	ok := "3de537a06e04b2ffe1fb0558ea16d3c0f042ed99f7e392698aa5120f568d4e2c"
	if _, err := ParsePublicKey(ok); err != nil {
		t.Fatalf("ParsePublicKey(%q): %v", ok, err)
	}
	for _, bad := range []string{"", ok[:62], ok + "00", strings.ToUpper(ok), "g" + ok[1:]} {
		if _, err := ParsePublicKey(bad); err == nil {
			t.Errorf("ParsePublicKey(%q) succeeded, want error", bad)
		}
	}
}
