package telemetry

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestConfig: the export is on only when a flag or a standard variable
// asks for it, OTEL_SDK_DISABLED and OTEL_*_EXPORTER=none turn it off,
// and a listen address off loopback, an endpoint that is no URL or a
// protocol aegis does not speak is refused before anything starts.
func TestConfig(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for name, tc := range map[string]struct {
		cfg            Config
		enabled        bool
		traces, metric bool
	}{
		"nothing":                {Config{Getenv: env()}, false, false, false},
		"the flag":               {Config{OTLPEndpoint: "http://127.0.0.1:4318", Getenv: env()}, true, true, true},
		"the variable":           {Config{Getenv: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")}, true, true, true},
		"traces only":            {Config{Getenv: env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces")}, true, true, false},
		"metrics exporter none":  {Config{Getenv: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_METRICS_EXPORTER", "none")}, true, true, false},
		"sdk disabled":           {Config{OTLPEndpoint: "http://127.0.0.1:4318", Getenv: env("OTEL_SDK_DISABLED", "true")}, false, false, false},
		"the page alone":         {Config{MetricsListen: "127.0.0.1:0", Getenv: env()}, true, false, false},
		"the page, sdk disabled": {Config{MetricsListen: "127.0.0.1:0", Getenv: env("OTEL_SDK_DISABLED", "true")}, true, false, false},
	} {
		tr, me := tc.cfg.otlp()
		if tc.cfg.Enabled() != tc.enabled || tr != tc.traces || me != tc.metric {
			t.Errorf("%s: enabled %v traces %v metrics %v, want %v %v %v", name, tc.cfg.Enabled(), tr, me, tc.enabled, tc.traces, tc.metric)
		}
	}
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"a page on every interface":       {Config{MetricsListen: ":9464", Getenv: env()}, "--metrics-listen"},
		"a page off loopback":             {Config{MetricsListen: "192.0.2.7:9464", Getenv: env()}, "not a loopback address"},
		"an endpoint without scheme":      {Config{OTLPEndpoint: "127.0.0.1:4318", Getenv: env()}, "want a URL"},
		"a protocol aegis does not speak": {Config{OTLPEndpoint: "http://c:4318", Getenv: env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")}, "grpc or http/protobuf"},
	} {
		if err := tc.cfg.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Check() = %v, want an error with %q", name, err, tc.want)
		}
	}
	ok := Config{MetricsListen: "192.0.2.7:9464", AllowRemote: true, Getenv: env()}
	if err := ok.Check(); err != nil {
		t.Errorf("a named address with AllowRemote: %v", err)
	}
}

// TestMetricsHandlerHost: the page answers only its own Host, as the
// console does, so that a page of another site that a DNS rebinding
// points at 127.0.0.1 cannot read it.
func TestMetricsHandlerHost(t *testing.T) {
	h := metricsHandler([]string{"127.0.0.1:9464", "localhost:9464"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	for host, want := range map[string]int{
		"127.0.0.1:9464":        http.StatusOK,
		"LOCALHOST:9464":        http.StatusOK,
		"attacker.example":      http.StatusForbidden,
		"attacker.example:9464": http.StatusForbidden,
		"127.0.0.1:9465":        http.StatusForbidden,
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("Host %q: %d, want %d", host, w.Code, want)
		}
	}
}
