package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aegis-dev/aegis/proxy/mcptest"
)

// telemetryPolicy denies add, so that a session has refused calls to count.
const telemetryPolicy = `version: 1
default: allow
rules:
  - id: no-add
    tool: add
    action: deny
`

// hostTrace is the trace context a host sends with a call (SEP-414).
const (
	hostTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	hostSpanID  = "00f067aa0ba902b7"
	hostTrace   = "00-" + hostTraceID + "-" + hostSpanID + "-01"
)

// requireTool finds a program the telemetry tests start: make test
// installs promtool and prometheus (telemetry-deps) and sets
// AEGIS_REQUIRE_TELEMETRY, so that there their test never skips; Jaeger,
// many minutes of compiling, is built by make jaeger-deps, and make
// test-telemetry sets AEGIS_REQUIRE_JAEGER.
func requireTool(t *testing.T, name string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	deps, require := "telemetry-deps", "AEGIS_REQUIRE_TELEMETRY"
	if name == "jaeger" {
		deps, require = "jaeger-deps", "AEGIS_REQUIRE_JAEGER"
	}
	if os.Getenv(require) != "" {
		t.Fatalf("no %s: run make %s", name, deps)
	}
	t.Skipf("%s is not installed (make %s installs it; make test-telemetry runs this test with it)", name, deps)
	return ""
}

// freeAddr is a loopback address with a port free a moment ago, for a
// program that takes no port 0.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// metricsAddr waits for the address wrap prints for --metrics-listen.
func (w *wrapProc) metricsAddr() string {
	w.l.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case p, ok := <-w.prompts:
			if !ok {
				w.l.t.Fatal("aegis wrap exited without serving metrics")
			}
			if a, ok := strings.CutPrefix(p, "aegis: metrics at http://"); ok {
				return strings.TrimSuffix(a, "/metrics")
			}
		case <-timeout:
			w.l.t.Fatal("aegis wrap printed no metrics address")
		}
	}
}

func httpGet(t *testing.T, u, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually polls check every 100 ms for up to d.
func eventually(t *testing.T, d time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		ok, got := check()
		if ok {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v; last: %s", what, d, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// telemetryCalls makes one allowed call with the host's trace context and
// two refused ones.
func telemetryCalls(w *wrapProc) {
	w.initialize()
	if a := w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"hi"},"_meta":{"traceparent":"`+hostTrace+`"}}`); !strings.Contains(a, `"hi"`) {
		w.l.t.Fatalf("echo: %s", a)
	}
	for id := 2; id <= 3; id++ {
		if a := w.call(id, "tools/call", `{"name":"add","arguments":{"a":1,"b":2}}`); !strings.Contains(a, "-32042") {
			w.l.t.Fatalf("add was not refused: %s", a)
		}
	}
}

// TestTelemetryPrometheus: wrap --metrics-listen serves a page that
// promtool accepts, only to requests for its own address (a page of
// another site that a DNS rebinding points at it gets 403), and a real
// Prometheus server that scrapes it answers a query for the refused calls
// with their count. The host's trace id is in the record's intent line,
// and the record still verifies.
func TestTelemetryPrometheus(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("runs aegis wrap and Prometheus")
	}
	promtool := requireTool(t, "promtool")
	prom := requireTool(t, "prometheus")
	t.Parallel()
	l := newLive(t, telemetryPolicy)
	w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--policy", l.policy, "--metrics-listen", "127.0.0.1:0", "--", filepath.Join(l.bin, "aegis-example-server")))
	addr := w.metricsAddr()
	telemetryCalls(w)

	var page string
	eventually(t, 10*time.Second, "the page counts two refusals", func() (bool, string) {
		_, page = httpGet(t, "http://"+addr+"/metrics", "")
		return strings.Contains(page, `aegis_refusals_total{aegis_refusal_reason="policy_denied",aegis_server="aegis-example-server"} 2`), page
	})
	for _, want := range []string{
		`aegis_calls_total{aegis_server="aegis-example-server",aegis_verdict="allowed",gen_ai_tool_name="echo"} 1`,
		`mcp_server_operation_duration_seconds_count{aegis_server="aegis-example-server",gen_ai_tool_name="echo",mcp_method_name="tools/call"} 1`,
		`mcp_client_operation_duration_seconds_count{`,
		`aegis_store_commits_total `, `aegis_store_size_bytes `, `process_memory_usage_bytes `, `process_open_fds `,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s:\n%s", want, page)
		}
	}
	if strings.Contains(page, `"a":1`) || strings.Contains(page, hostTraceID) {
		t.Errorf("the page holds a call's arguments or trace id:\n%s", page)
	}
	checkDocumented(t, page)
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = strings.NewReader(page)
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	_, port, _ := net.SplitHostPort(addr)
	if code, body := httpGet(t, "http://"+addr+"/metrics", "rebound.example:"+port); code != http.StatusForbidden {
		t.Errorf("a request for another Host: %d, want 403\n%s", code, body)
	}

	// A Prometheus server of the test's own scrapes the page every second.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: aegis\n    static_configs:\n      - targets: [%q]\n", addr)), 0o600)
	web := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := exec.CommandContext(ctx, prom, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web, "--log.level=warn")
	var plog syncBuffer
	p.Stdout, p.Stderr = &plog, &plog
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); p.Wait() }()
	q := "http://" + web + "/api/v1/query?query=" + url.QueryEscape(`sum(aegis_refusals_total{aegis_refusal_reason="policy_denied"})`)
	eventually(t, 60*time.Second, "Prometheus answers the refused calls' count", func() (bool, string) {
		_, body := httpGet(t, q, "")
		var r struct {
			Data struct {
				Result []struct {
					Value []any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		json.Unmarshal([]byte(body), &r)
		return len(r.Data.Result) == 1 && len(r.Data.Result[0].Value) == 2 && r.Data.Result[0].Value[1] == "2", body + "\n" + plog.String()
	})
	w.finish()

	rec, err := os.ReadFile(l.audit)
	if err != nil {
		t.Fatal(err)
	}
	intents := 0
	for _, line := range strings.Split(string(rec), "\n") {
		if strings.Contains(line, `"line_type":"intent"`) && strings.Contains(line, `"tool_id":"echo"`) {
			intents++
			if !strings.Contains(line, `"traceparent":"`+hostTrace+`"`) {
				t.Errorf("the intent line lacks the host's trace context: %s", line)
			}
		}
	}
	if intents != 1 {
		t.Errorf("%d intent lines of echo, want 1", intents)
	}
	if out, code := l.aegis("verify", l.audit); code != 0 {
		t.Errorf("verify: exit %d\n%s", code, out)
	}
}

// documentedMetrics returns the Prometheus names of docs/telemetry.md's
// table, and the metric names that its Grafana dashboard queries.
func documentedMetrics(t *testing.T) (table, queried map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "telemetry.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	table = map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if m := regexp.MustCompile("^\\| `([a-z_]+)` \\|").FindStringSubmatch(line); m != nil {
			table[m[1]] = true
		}
	}
	_, rest, ok := strings.Cut(doc, "```json\n{\n  \"title\": \"aegis\"")
	if !ok {
		t.Fatal("docs/telemetry.md has no dashboard")
	}
	body, _, _ := strings.Cut(rest, "\n```")
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte("{\n  \"title\": \"aegis\""+body), &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	queried = map[string]bool{}
	name := regexp.MustCompile(`\b(?:aegis|mcp|process)_[a-z_]+`)
	labels := regexp.MustCompile(`by \([^)]*\)|\{[^}]*\}`) // grouping and selectors name labels
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(labels.ReplaceAllString(tg.Expr, ""), -1) {
				queried[strings.TrimSuffix(n, "_bucket")] = true
			}
		}
	}
	if len(queried) < 10 {
		t.Fatalf("the dashboard queries %d metrics: %v", len(queried), queried)
	}
	return table, queried
}

// checkDocumented holds the page and the dashboard to the table of
// docs/telemetry.md: every metric the page serves is documented, and the
// dashboard queries no metric that aegis does not export.
func checkDocumented(t *testing.T, page string) {
	t.Helper()
	table, queried := documentedMetrics(t)
	for n := range queried {
		if !table[n] {
			t.Errorf("the dashboard queries %s, which the table does not list", n)
		}
	}
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			n := strings.Fields(line)[2]
			if _, ok := table[n]; !ok && !table[n+"_total"] && n != "target_info" {
				t.Errorf("the page serves %s, which docs/telemetry.md does not list", n)
			}
		}
	}
}

// jaegerConfig is a Jaeger (v2, an OpenTelemetry Collector) that takes
// OTLP over gRPC and HTTP, keeps the spans in memory behind its query API,
// and serves the metrics it receives for Prometheus.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
    metrics:
      receivers: [otlp]
      exporters: [prometheus]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 1000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
  prometheus:
    endpoint: %s
`

// jaegerSpan is a span as Jaeger's query API returns it.
type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

func (s jaegerSpan) tag(k string) any {
	for _, t := range s.Tags {
		if t.Key == k {
			return t.Value
		}
	}
	return nil
}

// jaegerTrace waits until Jaeger's query API at query holds trace id with
// a span named each of ops (Jaeger stores the spans of one export
// asynchronously, not all at once), and returns the trace's spans.
func jaegerTrace(t *testing.T, query, id string, ops ...string) []jaegerSpan {
	t.Helper()
	var spans []jaegerSpan
	eventually(t, 30*time.Second, "Jaeger holds the trace "+id, func() (bool, string) {
		_, body := httpGet(t, "http://"+query+"/api/traces/"+id, "")
		var r struct {
			Data []struct {
				Spans []jaegerSpan `json:"spans"`
			} `json:"data"`
		}
		json.Unmarshal([]byte(body), &r)
		if len(r.Data) != 1 {
			return false, body
		}
		spans = r.Data[0].Spans
		for _, op := range ops {
			if !slices.ContainsFunc(spans, func(s jaegerSpan) bool { return s.OperationName == op }) {
				return false, body
			}
		}
		return true, body
	})
	return spans
}

// TestTelemetryOTLP: a real OTLP receiver (Jaeger) gets the spans and the
// metrics of a recorded session, and the test reads them back from it:
// the call's span continues the host's trace (a child of the host's span)
// and names the record line it joins, with its commits as children; the
// receiver's metrics count the refused calls. aegis replay --otlp (over
// gRPC) re-emits the spans of a session that exported nothing while it
// ran, under the trace the host sent.
func TestTelemetryOTLP(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("runs aegis wrap and Jaeger")
	}
	built, _ := filepath.Abs(filepath.Join("..", "..", ".cache", "bin", "jaeger"))
	jaeger := requireTool(t, "jaeger", built)
	t.Parallel()
	query, queryGRPC, otlpGRPC, otlpHTTP, prom := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jaeger.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(jaegerConfig, query, queryGRPC, otlpGRPC, otlpHTTP, prom)), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := exec.CommandContext(ctx, jaeger, "--config", cfg)
	var jlog syncBuffer
	j.Stdout, j.Stderr = &jlog, &jlog
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); j.Wait() }()
	eventually(t, 30*time.Second, "Jaeger answers", func() (bool, string) {
		code, body := httpGet(t, "http://"+query+"/api/services", "")
		return code == http.StatusOK, body + "\n" + jlog.String()
	})

	l := newLive(t, telemetryPolicy)
	w := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--policy", l.policy, "--otlp-endpoint", "http://"+otlpHTTP, "--", filepath.Join(l.bin, "aegis-example-server")))
	telemetryCalls(w)
	w.finish() // the exporters flush as aegis exits

	spans := jaegerTrace(t, query, hostTraceID, "tools/call echo", "aegis.commit intent", "aegis.commit outcome")
	var call jaegerSpan
	names := map[string]string{}
	for _, s := range spans {
		names[s.OperationName] = s.SpanID
		if s.OperationName == "tools/call echo" {
			call = s
		}
	}
	if len(call.References) != 1 || call.References[0].SpanID != hostSpanID || call.References[0].RefType != "CHILD_OF" {
		t.Errorf("the call's span is not a child of the host's span %s: %+v", hostSpanID, call.References)
	}
	if seq, ok := call.tag("aegis.record.intent_seq").(float64); !ok || seq != 1 {
		t.Errorf("aegis.record.intent_seq = %v, want 1 (the intent line's seq)", call.tag("aegis.record.intent_seq"))
	}
	if call.tag("aegis.verdict") != "allowed" || call.tag("gen_ai.tool.name") != "echo" {
		t.Errorf("the call's span: %+v", call.Tags)
	}
	for _, child := range []string{"aegis.commit intent", "aegis.commit outcome"} {
		if names[child] == "" {
			t.Errorf("no %q span under the call: %v", child, names)
		}
	}
	for _, s := range spans {
		for _, tg := range s.Tags {
			if v, _ := tg.Value.(string); strings.Contains(v, `"a":1`) || strings.Contains(v, "hi") && tg.Key != "aegis.host.traceparent" {
				t.Errorf("span %s holds content: %s=%v", s.OperationName, tg.Key, tg.Value)
			}
		}
	}
	refused := regexp.MustCompile(`aegis_refusals_total\{[^}]*aegis_refusal_reason="policy_denied"[^}]*\} 2\b`)
	eventually(t, 30*time.Second, "the receiver's metrics count two refusals", func() (bool, string) {
		_, page := httpGet(t, "http://"+prom+"/metrics", "")
		return refused.MatchString(page), page
	})

	// A session that exported nothing, re-emitted from the stream over gRPC.
	const trace2 = "5bf92f3577b34da6a3ce929d0e0e4737"
	w = l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--policy", l.policy, "--", filepath.Join(l.bin, "aegis-example-server")))
	w.initialize()
	w.call(1, "tools/call", `{"name":"echo","arguments":{"message":"later"},"_meta":{"traceparent":"00-`+trace2+`-10f067aa0ba902b7-01"}}`)
	w.finish()
	rc := exec.Command(filepath.Join(l.bin, "aegis"), "replay", "--state-dir", l.state, "--otlp", "http://"+otlpGRPC, "last")
	rc.Env = append(slices.Clip(l.env), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
	out, err := rc.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "exported 1 spans of 1 calls") {
		t.Fatalf("replay --otlp: %v\n%s", err, out)
	}
	spans = jaegerTrace(t, query, trace2, "tools/call echo")
	if len(spans) != 1 || len(spans[0].References) != 1 || spans[0].References[0].SpanID != "10f067aa0ba902b7" {
		t.Errorf("the replayed trace: %+v", spans)
	}
}

var metricsAtRE = regexp.MustCompile(`aegis: metrics at http://(\S+)/metrics`)

// TestTelemetryHTTPSessionsEnded: gateway --listen counts its HTTP
// sessions by why they ended: at --max-sessions 1 a second client evicts
// the first, idle, one, and then deletes its own; the page says one of
// each, and promtool still accepts it.
func TestTelemetryHTTPSessionsEnded(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("runs aegis gateway --listen")
	}
	promtool := requireTool(t, "promtool")
	t.Parallel()
	l := newLive(t, "")
	h := l.httpGateway(gatewayConfig(l.bin), "--max-sessions", "1", "--metrics-listen", "127.0.0.1:0")
	m := metricsAtRE.FindStringSubmatch(h.stderr.String())
	if m == nil {
		t.Fatalf("no metrics address on stderr:\n%s", h.stderr.String())
	}
	ctx := context.Background()
	connect := func(name string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, nil)
		// Without the standing GET stream, which would keep the session
		// busy: only a session with no request open is evicted. A host of
		// the session protocol: each its own HTTP session.
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: mcptest.BearerClient(h.token), DisableStandaloneSSE: true}, sessionHost)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, h.stderr.String())
		}
		return cs
	}
	first := connect("first")
	defer first.Close()
	connect("second").Close() // evicts the first, then ends by DELETE

	var page string
	eventually(t, 20*time.Second, "the page counts one session evicted and one deleted", func() (bool, string) {
		_, page = httpGet(t, "http://"+m[1]+"/metrics", "")
		return strings.Contains(page, `aegis_http_sessions_closed_total{aegis_http_session_ended="evicted"} 1`+"\n") &&
			strings.Contains(page, `aegis_http_sessions_closed_total{aegis_http_session_ended="deleted"} 1`+"\n"), page
	})
	checkDocumented(t, page)
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = strings.NewReader(page)
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
