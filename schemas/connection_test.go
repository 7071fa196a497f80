package schemas

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

func connectionGoldens(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "connection", dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no goldens in testdata/connection/%s: %v", dir, err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = bytes.TrimSpace(b)
	}
	return out
}

func resolvedConnectionSchema(t *testing.T) *jsonschema.Resolved {
	t.Helper()
	var s jsonschema.Schema
	if err := json.Unmarshal(ServerConnectionSchema, &s); err != nil {
		t.Fatalf("parse server_connection.schema.json: %v", err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("resolve server_connection.schema.json: %v", err)
	}
	return rs
}

// The JSON Schema of server.connection and the Go decoder agree: every
// valid golden passes both and survives a round trip; every invalid one,
// named after what it would put in the record (a secret of the url, a
// header, a state without its reason), is refused by both.
func TestServerConnectionGoldens(t *testing.T) {
	rs := resolvedConnectionSchema(t)
	for name, doc := range connectionGoldens(t, "valid") {
		t.Run("valid/"+name, func(t *testing.T) {
			if err := schemaAccepts(rs, doc); err != nil {
				t.Errorf("JSON Schema refuses: %v", err)
			}
			c, err := DecodeServerConnection(doc)
			if err != nil {
				t.Fatalf("DecodeServerConnection: %v", err)
			}
			b, _ := json.Marshal(c)
			if !bytes.Equal(b, doc) {
				t.Errorf("round trip: %s, want %s", b, doc)
			}
		})
	}
	for name, doc := range connectionGoldens(t, "invalid") {
		t.Run("invalid/"+name, func(t *testing.T) {
			if err := schemaAccepts(rs, doc); err == nil {
				t.Errorf("JSON Schema accepts %s", doc)
			}
			if _, err := DecodeServerConnection(doc); err == nil {
				t.Errorf("DecodeServerConnection accepts %s", doc)
			}
		})
	}
}

// A server.connection event is a valid envelope.
func TestServerConnectionEnvelope(t *testing.T) {
	doc := []byte(`{"v":1,"id":"01KBA3M0Q7AAAAAAAAAAAAAAAD","session":"01KBA3M0Q6XN2C8V5R7T9W1Y3Z","kind":"server.connection","time":"2026-11-30T08:00:01Z","payload":{"server":"docs","url":"https://mcp.example.com/mcp","transport":"streamable","state":"closed"}}`)
	if err := schemaAccepts(resolvedEnvelopeSchema(t), doc); err != nil {
		t.Errorf("envelope schema: %v", err)
	}
	if _, err := DecodeEvent(doc); err != nil {
		t.Errorf("DecodeEvent: %v", err)
	}
}
