package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

func resolvedEnvelopeSchema(t *testing.T) *jsonschema.Resolved {
	t.Helper()
	var s jsonschema.Schema
	if err := json.Unmarshal(EnvelopeSchema, &s); err != nil {
		t.Fatalf("parse envelope.schema.json: %v", err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("resolve envelope.schema.json: %v", err)
	}
	return rs
}

func schemaAccepts(rs *jsonschema.Resolved, doc []byte) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return rs.Validate(v)
}

func goldens(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "envelope", dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no goldens in testdata/envelope/%s: %v", dir, err)
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

func TestGoldenEnvelopesValidate(t *testing.T) {
	rs := resolvedEnvelopeSchema(t)
	for name, doc := range goldens(t, "valid") {
		t.Run(name, func(t *testing.T) {
			if err := schemaAccepts(rs, doc); err != nil {
				t.Errorf("JSON Schema refuses golden: %v", err)
			}
			e, err := DecodeEvent(doc)
			if err != nil {
				t.Fatalf("DecodeEvent = %v, want nil", err)
			}
			// Encoding the decoded event and decoding it again is stable.
			enc, err := e.Encode()
			if err != nil {
				t.Fatalf("Encode = %v", err)
			}
			e2, err := DecodeEvent(enc)
			if err != nil {
				t.Fatalf("DecodeEvent(Encode) = %v", err)
			}
			if !e.Time.Equal(e2.Time) || e.ID != e2.ID || !bytes.Equal(e.Payload, e2.Payload) {
				t.Errorf("round trip changed the event: %+v vs %+v", e, e2)
			}
		})
	}
}

// Every invalid golden is named after what it would smuggle onto the stream;
// both the schema and the Go decoder must refuse it.
func TestInvalidEnvelopesAreRefused(t *testing.T) {
	rs := resolvedEnvelopeSchema(t)
	for name, doc := range goldens(t, "invalid") {
		t.Run(name, func(t *testing.T) {
			if err := schemaAccepts(rs, doc); err == nil {
				t.Errorf("JSON Schema accepts %s", doc)
			}
			if _, err := DecodeEvent(doc); !errors.Is(err, ErrInvalidEvent) {
				t.Errorf("DecodeEvent = %v, want ErrInvalidEvent", err)
			}
		})
	}
}

func TestSchemaListsEveryKind(t *testing.T) {
	var s struct {
		Properties struct {
			Kind struct {
				Enum []string `json:"enum"`
			} `json:"kind"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(EnvelopeSchema, &s); err != nil {
		t.Fatal(err)
	}
	var got, want []string
	got = append(got, s.Properties.Kind.Enum...)
	for _, k := range Kinds() {
		want = append(want, string(k))
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("schema kinds = %v, Go kinds = %v", got, want)
	}
}

func TestNewIDSortsByTime(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	base := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	prev := ""
	for i := 0; i < 1000; i++ {
		now := base.Add(time.Duration(i) * time.Millisecond)
		id, err := NewID(now, rnd)
		if err != nil {
			t.Fatal(err)
		}
		if !ValidID(id) {
			t.Fatalf("NewID = %q, not ValidID", id)
		}
		if id <= prev {
			t.Fatalf("id %q made at %v sorts before %q", id, now, prev)
		}
		got, err := IDTime(id)
		if err != nil || !got.Equal(now) {
			t.Fatalf("IDTime(%q) = %v, %v; want %v", id, got, err, now)
		}
		prev = id
	}
}

func TestNewIDShortRandomFails(t *testing.T) {
	if _, err := NewID(time.Now(), bytes.NewReader([]byte{1, 2})); err == nil {
		t.Fatal("NewID with 2 random bytes succeeded")
	}
}

func TestValidIDRefusesSubjectTokens(t *testing.T) {
	for _, s := range []string{"", "*", ">", "a.b", "01KBA3M0Q7AAAAAAAAAAAAAA.A", "01KBA3M0Q7AAAAAAAAAAAAAA A", "81KBA3M0Q7AAAAAAAAAAAAAAAA", "01KBA3M0Q7AAAAAAAAAAAAAAAI"} {
		if ValidID(s) {
			t.Errorf("ValidID(%q) = true", s)
		}
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, dir := range []string{"valid", "invalid"} {
		files, _ := filepath.Glob(filepath.Join("testdata", "envelope", dir, "*.json"))
		for _, p := range files {
			b, _ := os.ReadFile(p)
			f.Add(b)
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"v":1}`)) // truncated envelope
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEvent(b)
		if err != nil {
			if e.ID != "" || e.Payload != nil {
				t.Fatalf("error %v with a non-zero event", err)
			}
			return
		}
		enc, err := e.Encode()
		if err != nil {
			t.Fatalf("decoded event does not encode: %v", err)
		}
		if _, err := DecodeEvent(enc); err != nil {
			t.Fatalf("encoded event does not decode: %v", err)
		}
	})
}

// The fast path must accept exactly what the general decoder accepts in
// its layout, and give the same event.
func FuzzDecodeEventFastPath(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "envelope", "*", "*.json"))
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(bytes.TrimSpace(b))
		if e, err := DecodeEvent(bytes.TrimSpace(b)); err == nil {
			enc, _ := e.Encode()
			f.Add(enc)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeEncoded(b, true)
		if !ok {
			return
		}
		slow, err := decodeEventSlow(b)
		if err != nil {
			t.Fatalf("fast path accepted %q, general decoder refuses: %v", b, err)
		}
		if fast.ID != slow.ID || fast.Session != slow.Session || fast.Kind != slow.Kind || !fast.Time.Equal(slow.Time) || !bytes.Equal(fast.Payload, slow.Payload) {
			t.Fatalf("fast %+v, slow %+v", fast, slow)
		}
	})
}

// The hand-built frame payload is byte for byte what json.Marshal writes,
// and an event carrying it validates through the fast check exactly when
// the general one accepts it.
func FuzzAppendFramePayload(f *testing.F) {
	f.Add([]byte(nil))
	f.Add([]byte(""))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	f.Add([]byte{0xff, 0xfe, '\r', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if b == nil {
			b = []byte{}
		}
		want, err := json.Marshal(FramePayload{Bytes: b})
		if err != nil {
			t.Fatal(err)
		}
		got := AppendFramePayload(nil, b)
		if !bytes.Equal(got, want) {
			t.Fatalf("AppendFramePayload = %s, json.Marshal = %s", got, want)
		}
		if err := validFramePayloadSlow(got); err != nil {
			t.Fatalf("general check refuses %s: %v", got, err)
		}
		if !compactFramePayload(got) {
			t.Fatalf("fast check refuses %s", got)
		}
	})
}

// The store sizes a frame event it has not built yet by FrameEventBound: an
// envelope longer than the bound could overrun a batch or slip past the
// event size limit.
func FuzzFrameEventBound(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), int64(0), uint8(0))
	f.Add([]byte{}, int64(253402300799), uint8(1)) // 9999-12-31T23:59:59Z
	f.Add([]byte{0xff}, int64(-62167219200), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, sec int64, k uint8) {
		kind := []Kind{KindFrameC2S, KindFrameS2C, KindFrameRefusal}[int(k)%3]
		at := time.Unix(sec, int64(k)*1111).UTC()
		if at.Year() < 0 || at.Year() > 9999 {
			t.Skip("outside the bound's years")
		}
		e := Event{V: EnvelopeVersion, ID: "01JDQ4Z5G0000000000000000A", Session: "01JDQ4Z5G0000000000000000B",
			Kind: kind, Time: at, Payload: AppendFramePayload(nil, b)}
		data, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		bound := FrameEventBound(kind, len(b))
		if len(data) > bound || bound-len(data) > 10 {
			t.Fatalf("envelope of %d bytes, bound %d: %s", len(data), bound, data)
		}
	})
}

// EncodeFrameEvent, which the store uses to build a frame's envelope
// without a payload copy, gives exactly the envelope Encode gives, in one
// allocation, and refuses what Encode refuses.
func FuzzEncodeFrameEvent(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), int64(0), uint8(0), "01JDQ4Z5G0000000000000000B")
	f.Add([]byte{}, int64(253402300799), uint8(1), "01JDQ4Z5G0000000000000000B")
	f.Add([]byte{0xff, '\r', '\n'}, int64(1700000000), uint8(2), "not-a-session")
	f.Add([]byte("x"), int64(1700000000), uint8(3), "01JDQ4Z5G0000000000000000B")
	f.Fuzz(func(t *testing.T, b []byte, sec int64, k uint8, session string) {
		kind := []Kind{KindFrameC2S, KindFrameS2C, KindFrameRefusal, KindNote}[int(k)%4]
		at := time.Unix(sec, int64(k)*1111).UTC()
		e := Event{V: EnvelopeVersion, ID: "01JDQ4Z5G0000000000000000A", Session: session, Kind: kind, Time: at}
		got, gotErr := EncodeFrameEvent(e, b)
		e.Payload = AppendFramePayload(nil, b)
		want, wantErr := e.Encode()
		if kind == KindNote {
			if gotErr == nil {
				t.Fatalf("EncodeFrameEvent took kind %s", kind)
			}
			return
		}
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("EncodeFrameEvent error %v, Encode error %v", gotErr, wantErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("EncodeFrameEvent = %s\nEncode = %s", got, want)
		}
		if gotErr == nil && at.Year() >= 0 && at.Year() <= 9999 && cap(got) != FrameEventBound(kind, len(b)) {
			t.Fatalf("cap %d, want one allocation of the bound %d", cap(got), FrameEventBound(kind, len(b)))
		}
	})
}

// What this process encoded, DecodeOwnEvent reads as DecodeEvent does,
// and a frame event's envelope without its frame is the same event, with
// no bytes, still valid.
func TestOwnEventsAndFrameEnvelopes(t *testing.T) {
	at := time.Date(2026, 12, 5, 21, 0, 0, 123456789, time.UTC)
	id, err := NewID(at, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	head := Event{V: EnvelopeVersion, ID: id, Session: id, Time: at}
	var encoded [][]byte
	for _, frame := range [][]byte{nil, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`), {0xff, '\r', '"', '\\', 0}} {
		for _, k := range []Kind{KindFrameC2S, KindFrameS2C, KindFrameRefusal} {
			e := head
			e.Kind = k
			b, err := EncodeFrameEvent(e, frame)
			if err != nil {
				t.Fatal(err)
			}
			encoded = append(encoded, b)
			env, ok := FrameEnvelope(b)
			if !ok {
				t.Fatalf("FrameEnvelope(%s) refused it", b)
			}
			got, err := DecodeEvent(env)
			if err != nil {
				t.Fatalf("DecodeEvent(%s) = %v", env, err)
			}
			want, _ := DecodeEvent(b)
			want.Payload = json.RawMessage(`{"bytes":""}`)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("FrameEnvelope(%s) decodes to %+v, want %+v", b, got, want)
			}
		}
	}
	e := head
	e.Kind = KindCallIntent
	e.Payload = json.RawMessage(`{"line":"{\"call_id\":\"call-1\"}","call_id":"call-1","tool_id":"t"}`)
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := FrameEnvelope(b); ok {
		t.Fatalf("FrameEnvelope took an intent for a frame: %s", b)
	}
	encoded = append(encoded, b, []byte(` {"v":1}`))
	for _, b := range encoded {
		got, gerr := DecodeOwnEvent(b)
		want, werr := DecodeEvent(b)
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeOwnEvent(%s) = %+v, %v; DecodeEvent gives %+v, %v", b, got, gerr, want, werr)
		}
	}
}
