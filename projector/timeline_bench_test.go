package projector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// benchEvents is the size of the store the benchmarks read; set
// AEGIS_BENCH_EVENTS to change it.
func benchEvents(b *testing.B) int {
	if v := os.Getenv("AEGIS_BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("AEGIS_BENCH_EVENTS=%q", v)
		}
		return n
	}
	return 1_000_000
}

// bigStore writes n events to a fresh store in batches of 1024 (one
// commit each): sessions of 100 000 events, each call a request frame, an
// intent, an answer frame and a signed-size outcome; every 10th call is
// refused by policy with its refusal frame, every 50th waits for an
// approval that is then granted.
func bigStore(b *testing.B, n int) (*events.Store, int) {
	b.Helper()
	st, err := events.Open(context.Background(), events.Config{Dir: filepath.Join(b.TempDir(), "state"), MaxBatchEvents: 64})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close(context.Background()) })
	now := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	sig := strings.Repeat("5a", 64)
	var seq uint64 // the current session's next audit seq
	line := func(l schemas.Line, err error) string {
		defer func() { seq++ }()
		if err != nil {
			b.Fatal(err)
		}
		l.Set("seq", seq)
		l.Set("prev_hash", schemas.GenesisHash)
		if l.Type() != schemas.LineIntent {
			l.Set("key_id", strings.Repeat("c", 64))
			l.Set("signature", sig)
		}
		c, err := l.Canonical()
		if err != nil {
			b.Fatal(err)
		}
		return string(c)
	}
	var batch []schemas.Event
	var last *events.Receipt
	written := 0
	add := func(sess string, kind schemas.Kind, payload any) {
		e, err := st.NewEvent(sess, kind, payload)
		if err != nil {
			b.Fatal(err)
		}
		e.Time = now
		batch = append(batch, e)
		written++
		if len(batch) == 1024 {
			rs, err := st.EnqueueMany(batch...)
			if err != nil {
				b.Fatal(err)
			}
			last = rs[len(rs)-1]
			batch = batch[:0]
		}
	}
	tools := []string{"echo", "search", "read_file", "deploy"}
	for s := 0; written < n; s++ {
		sess, _ := st.NewSession()
		seq = 0
		add(sess, schemas.KindSessionOpened, projector.SessionOpened{Line: line(schemas.Open{PublicKey: strings.Repeat("ab", 32)}.Line()), AuditPath: "/r/calls.aarl",
			KeyID: strings.Repeat("c", 64), PID: 1000 + s, Argv: []string{"mcp-server", "--stdio"}, Version: "bench"})
		for i := uint64(1); written < n && written < (s+1)*100_000; i++ {
			now = now.Add(time.Millisecond)
			tool := tools[i%uint64(len(tools))]
			c := schemas.WrapCall{CallID: schemas.CallID(i), ToolID: tool, RequestDigest: schemas.HashHex([]byte(strconv.FormatUint(i, 10))), PolicySetHash: schemas.WrapPassthroughPolicySetHash}
			req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"path":"/srv/data/file-%d.txt","query":"some words to look for"}}}`, i, tool, i)
			add(sess, schemas.KindFrameC2S, schemas.FramePayload{Bytes: []byte(req)})
			add(sess, schemas.KindCallIntent, projector.CallPayload{Line: line(c.Intent().Line()), CallID: c.CallID, ToolID: tool})
			switch {
			case i%10 == 0:
				add(sess, schemas.KindCallOutcome, projector.CallPayload{Line: line(c.Refused(schemas.PolicyDenied("denied by rule `no-"+tool+"`"), "no-"+tool).Line()), CallID: c.CallID, ToolID: tool})
				add(sess, schemas.KindFrameRefusal, schemas.FramePayload{Bytes: []byte(fmt.Sprintf(`{"error":{"code":-32042,"data":{"aegis":{"code":"POLICY_DENIED","layer":"wrap"}},"message":"aegis wrap refused this tools/call"},"id":%d,"jsonrpc":"2.0"}`, i))})
			case i%50 == 1:
				id := "apr-gate-" + tool + "-" + strconv.FormatUint(i, 10)
				add(sess, schemas.KindApprovalRequested, map[string]any{"approval_id": id, "tool_id": tool, "request_digest": c.RequestDigest, "args_digest": c.RequestDigest, "session": sess, "requested_at": now, "expires_at": now.Add(10 * time.Minute)})
				add(sess, schemas.KindCallOutcome, projector.CallPayload{Line: line(c.Refused(schemas.PolicyPendingApproval(id), "gate").Line()), CallID: c.CallID, ToolID: tool})
				add(sess, schemas.KindApprovalResolved, map[string]string{"line": line(schemas.Decision{ApprovalID: id, Verdict: schemas.Approved(schemas.ApprovalScope{ToolID: tool})}.Line()), "approval_id": id, "op": "approve", "by": "ann@box, pid 7"})
			default:
				add(sess, schemas.KindFrameS2C, schemas.FramePayload{Bytes: []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"found 3 matches in file-%d.txt"}]}}`, i, i))})
				add(sess, schemas.KindCallOutcome, projector.CallPayload{Line: line(c.Answered(schemas.HashHex([]byte(req)), i%40).Line()), CallID: c.CallID, ToolID: tool})
			}
		}
		if written < n {
			add(sess, schemas.KindChildExited, map[string]any{"code": 0, "server_exited_first": false})
			add(sess, schemas.KindSessionClosed, projector.LinePayload{Line: line(schemas.CloseLine(), nil)})
		}
	}
	if len(batch) > 0 {
		rs, err := st.EnqueueMany(batch...)
		if err != nil {
			b.Fatal(err)
		}
		last = rs[len(rs)-1]
	}
	if _, err := last.Wait(context.Background()); err != nil {
		b.Fatal(err)
	}
	return st, written
}

// BenchmarkStore reads a store of a million events (AEGIS_BENCH_EVENTS) the
// way aegis replay, aegis sessions and aegis recheck do, and reports events
// per second for each: decode is the stream alone, the rest add their fold.
// Run with -benchtime 1x: one iteration reads the whole store.
func BenchmarkStore(b *testing.B) {
	n := benchEvents(b)
	t0 := time.Now()
	st, n := bigStore(b, n)
	b.Logf("wrote %d events in %v (%.0f events/s)", n, time.Since(t0).Round(time.Millisecond), float64(n)/time.Since(t0).Seconds())
	set, err := policy.Parse("bench.yaml", []byte(`version: 1
rules:
  - id: no-deploy
    action: deny
    tool: deploy
  - id: search-budget
    action: rate_limit
    tool: search
    rate: {max: 100, per_seconds: 60}
  - id: ask-read
    action: pending_approval
    tool: read_file
`))
	if err != nil {
		b.Fatal(err)
	}
	run := func(name string, fold func() func(events.Record)) {
		b.Run(name, func(b *testing.B) {
			seen := 0
			for b.Loop() {
				f := fold()
				seen = 0
				err := st.Replay(context.Background(), events.Position{}, func(r events.Record) error {
					seen++
					f(r)
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			if seen != n {
				b.Fatalf("replayed %d events, wrote %d", seen, n)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(0, "ns/op")
		})
	}
	run("decode", func() func(events.Record) { return func(events.Record) {} })
	run("replay", func() func(events.Record) {
		// aegis replay --follow without SESSION: every step of every
		// session, rendered as text.
		tl := projector.NewTimeline("")
		return func(r events.Record) {
			if st, ok := tl.Fold(r); ok {
				io.WriteString(io.Discard, st.Line())
			}
		}
	})
	run("replay-json", func() func(events.Record) {
		tl := projector.NewTimeline("")
		return func(r events.Record) {
			if st, ok := tl.Fold(r); ok {
				json.Marshal(st)
			}
		}
	})
	run("projections", func() func(events.Record) {
		var p projector.Projections
		return p.Fold
	})
	run("recheck", func() func(events.Record) {
		rc := projector.NewRecheck(projector.PolicyEvaluator(set))
		return func(r events.Record) { rc.Fold(r) }
	})
}
