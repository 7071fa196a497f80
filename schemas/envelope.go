package schemas

import (
	"bytes"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// EnvelopeVersion is the schema version of [Event]; it is the value of the
// envelope's "v" member. An incompatible change to the envelope bumps it, and
// readers refuse versions they do not know.
const EnvelopeVersion = 1

// EnvelopeSchema is the JSON Schema (draft 2020-12) of the event envelope. The
// Go validation in [Event.Validate] and this schema accept the same documents;
// a test holds them to that.
//
//go:embed envelope.schema.json
var EnvelopeSchema []byte

// Kind names what an event records. It is the last part of the event's NATS
// subject, aegis.<session>.<kind>.
type Kind string

// The kinds of event. A kind not listed here is refused by [Event.Validate];
// adding one is a schema change and goes into envelope.schema.json too.
const (
	KindSessionOpened      Kind = "session.opened"
	KindSessionClosed      Kind = "session.closed"
	KindFrameC2S           Kind = "frame.c2s"
	KindFrameS2C           Kind = "frame.s2c"
	KindCallIntent         Kind = "call.intent"
	KindCallVerdict        Kind = "call.verdict"
	KindCallOutcome        Kind = "call.outcome"
	KindApprovalRequested  Kind = "approval.requested"
	KindApprovalResolved   Kind = "approval.resolved"
	KindApprovalExpired    Kind = "approval.expired"
	KindApprovalRefused    Kind = "approval.refused"
	KindFrameRefusal       Kind = "frame.refusal"
	KindProfileSwitched    Kind = "profile.switched"
	KindConfinementApplied Kind = "confinement.applied"
	KindChildStarted       Kind = "child.started"
	KindChildExited        Kind = "child.exited"
	KindAuditLine          Kind = "audit.line"
	KindNote               Kind = "note"
	// KindCallCancelled records a host's notifications/cancelled for a
	// tools/call in flight.
	KindCallCancelled Kind = "call.cancelled"
	// KindFrameDropped records that a frame (held in the frame event
	// before it) was not relayed, and why.
	KindFrameDropped Kind = "frame.dropped"
	// KindStoreRotated is the first event of a stream that a rotation
	// started: what was rolled over, and the record files sealed with it.
	KindStoreRotated Kind = "store.rotated"
	// KindTaskResult records the result of a task-augmented tools/call
	// (tasks/result) before the host is shown it: the call's own outcome
	// recorded only that the task was created.
	KindTaskResult Kind = "task.result"
	// KindRecordCheckpoint carries a signed checkpoint of a record file
	// (its first lines, as the file held them), and the tree state the
	// next session on that file resumes from.
	KindRecordCheckpoint Kind = "record.checkpoint"
	// KindToolPinned pins a server's tool to the digest of its definition
	// (first sight, an approval, or on_tool_change: allow); see toolpin.go.
	KindToolPinned Kind = "tool.pinned"
	// KindToolChanged records that a server listed a tool whose definition
	// differs from its pin, a tool it had not pinned, or no longer lists a
	// pinned tool.
	KindToolChanged Kind = "tool.changed"
	// KindPinsReset removes pins (aegis pins reset): the next listing of
	// the server pins its tools again at first sight.
	KindPinsReset Kind = "pins.reset"
	// KindAnchorCosigned stores a witness's cosignature of a checkpoint of
	// the state directory's anchor log (anchor.go).
	KindAnchorCosigned Kind = "anchor.cosigned"
)

var kinds = map[Kind]bool{
	KindSessionOpened: true, KindSessionClosed: true,
	KindFrameC2S: true, KindFrameS2C: true,
	KindCallIntent: true, KindCallVerdict: true, KindCallOutcome: true,
	KindApprovalRequested: true, KindApprovalResolved: true,
	KindApprovalExpired: true, KindApprovalRefused: true, KindFrameRefusal: true,
	KindProfileSwitched: true, KindConfinementApplied: true,
	KindChildStarted: true, KindChildExited: true,
	KindAuditLine: true, KindNote: true,
	KindCallCancelled: true, KindFrameDropped: true,
	KindStoreRotated: true, KindTaskResult: true,
	KindRecordCheckpoint: true, KindAnchorCosigned: true,
	// Tool pins.
	KindToolPinned: true, KindToolChanged: true, KindPinsReset: true,
	// Remote servers of the gateway (connection.go).
	KindServerConnection: true,
}

// Kinds returns every known kind, in no particular order.
func Kinds() []Kind {
	out := make([]Kind, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	return out
}

// Known reports whether k is a kind this version of the envelope defines.
func (k Kind) Known() bool { return kinds[k] }

// Event is one immutable fact. Its JSON form is the envelope:
//
//	{"v":1,"id":"…","session":"…","kind":"frame.c2s","time":"…","payload":{…}}
//
// ID and Session are [NewID] values (26 characters of Crockford base32 whose
// first 10 encode the millisecond time, so they sort by time). Time is UTC.
// Payload is a JSON object whose shape depends on Kind; frames carry their
// exact bytes as {"bytes":"<base64>"} (see [FramePayload]).
type Event struct {
	V       int             `json:"v"`
	ID      string          `json:"id"`
	Session string          `json:"session"`
	Kind    Kind            `json:"kind"`
	Time    time.Time       `json:"time"`
	Payload json.RawMessage `json:"payload"`
}

// FramePayload is the payload of frame.c2s and frame.s2c events: the exact
// bytes of one frame as read off the wire, without its line terminator.
type FramePayload struct {
	Bytes []byte `json:"bytes"`
}

// ValidationError says why an event was refused. Field names the envelope
// member at fault.
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid event: %s: %s", e.Field, e.Reason)
}

// ErrInvalidEvent is wrapped by every error that [Event.Validate] and
// [DecodeEvent] return for a document that is not a valid envelope.
var ErrInvalidEvent = errors.New("invalid event")

func (e *ValidationError) Unwrap() error { return ErrInvalidEvent }

// Validate checks the envelope: the version, the id and session formats, a
// known kind, a set time and an object payload. It does not look inside the
// payload except for frame kinds, whose payload must be a [FramePayload].
func (e *Event) Validate() error {
	if e.V != EnvelopeVersion {
		return &ValidationError{"v", fmt.Sprintf("version %d is not %d", e.V, EnvelopeVersion)}
	}
	if !ValidID(e.ID) {
		return &ValidationError{"id", fmt.Sprintf("%q is not a 26-character id", e.ID)}
	}
	if !ValidID(e.Session) {
		return &ValidationError{"session", fmt.Sprintf("%q is not a 26-character id", e.Session)}
	}
	if !e.Kind.Known() {
		return &ValidationError{"kind", fmt.Sprintf("unknown kind %q", string(e.Kind))}
	}
	if e.Time.IsZero() {
		return &ValidationError{"time", "not set"}
	}
	isFrame := e.Kind == KindFrameC2S || e.Kind == KindFrameS2C || e.Kind == KindFrameRefusal
	if isFrame && compactFramePayload(e.Payload) {
		// {"bytes":"<base64>"} exactly: a JSON object by construction.
		return nil
	}
	p := bytes.TrimLeft(e.Payload, " \t\r\n")
	if len(p) == 0 || p[0] != '{' || !json.Valid(e.Payload) {
		return &ValidationError{"payload", "not a JSON object"}
	}
	if isFrame {
		if err := validFramePayload(e.Payload); err != nil {
			return &ValidationError{"payload", "frame payload: " + err.Error()}
		}
	}
	return nil
}

// Subject is the NATS subject the event is published on:
// aegis.<session>.<kind>.
func (e *Event) Subject() string {
	return "aegis." + e.Session + "." + string(e.Kind)
}

// Encode validates the event and returns its envelope as compact JSON with
// no newline in it. Time is written in UTC. The envelope is assembled
// directly: every member but the payload is a validated token that needs no
// escaping, and the payload is copied as it is (compacted if it spans lines).
func (e *Event) Encode() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	payload := []byte(e.Payload)
	if bytes.ContainsAny(payload, "\r\n") {
		var c bytes.Buffer
		if err := json.Compact(&c, payload); err != nil {
			return nil, fmt.Errorf("encode event: %w", err)
		}
		payload = c.Bytes()
	}
	b := e.appendHead(make([]byte, 0, 112+len(payload)))
	b = append(b, payload...)
	b = append(b, '}')
	return b, nil
}

// appendHead appends the envelope up to its payload.
func (e *Event) appendHead(b []byte) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(e.V), 10)
	b = append(b, `,"id":"`...)
	b = append(b, e.ID...)
	b = append(b, `","session":"`...)
	b = append(b, e.Session...)
	b = append(b, `","kind":"`...)
	b = append(b, e.Kind...)
	b = append(b, `","time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, `","payload":`...)
}

// EncodeFrameEvent returns the envelope of e with a frame payload holding
// frame: the bytes [Event.Encode] gives for e with the payload
// AppendFramePayload(nil, frame), built in one allocation of the exact
// size, with the base64 written straight into it. For a 16 MiB frame that
// spares the 22 MiB payload that Encode would copy. e.Payload is ignored.
func EncodeFrameEvent(e Event, frame []byte) ([]byte, error) {
	if e.Kind != KindFrameC2S && e.Kind != KindFrameS2C && e.Kind != KindFrameRefusal {
		return nil, &ValidationError{"kind", fmt.Sprintf("%q is not a frame kind", string(e.Kind))}
	}
	e.Payload = json.RawMessage(framePre + frameSuf) // the fields, checked without the bytes
	if err := e.Validate(); err != nil {
		return nil, err
	}
	b := e.appendHead(make([]byte, 0, FrameEventBound(e.Kind, len(frame))))
	b = append(b, framePre...)
	b = base64.StdEncoding.AppendEncode(b, frame)
	b = append(b, frameSuf...)
	return append(b, '}'), nil
}

// DecodeEvent parses one envelope strictly: unknown members, trailing data
// and an unknown version are refused, and the result is validated.
//
// Envelopes in exactly the layout [Event.Encode] writes (every stored event
// aegis made) are read without the reflection decoder; anything else takes
// the general path. Both accept the same envelopes and give the same
// events, which FuzzDecodeEventFastPath checks.
func DecodeEvent(b []byte) (Event, error) {
	if e, ok := decodeEncoded(b, true); ok {
		return e, nil
	}
	return decodeEventSlow(b)
}

// DecodeOwnEvent is [DecodeEvent] for bytes that this process's
// [Event.Encode] or [EncodeFrameEvent] wrote, which validated the event
// then (or such bytes passed through [FrameEnvelope]): in that layout it
// does not validate the event again. Anything else is read by DecodeEvent.
func DecodeOwnEvent(b []byte) (Event, error) {
	if e, ok := decodeEncoded(b, false); ok {
		return e, nil
	}
	return DecodeEvent(b)
}

// decodeEncoded reads the exact layout of Encode:
// {"v":1,"id":"<26>","session":"<26>","kind":"<kind>","time":"<RFC 3339>","payload":<object>}
// It reports false for anything else, leaving the decision to the general
// decoder.
func decodeEncoded(b []byte, validate bool) (Event, bool) {
	const (
		pV       = `{"v":1,"id":"`
		pSession = `","session":"`
		pKind    = `","kind":"`
		pTime    = `","time":"`
		pPayload = `","payload":`
	)
	rest, ok := bytes.CutPrefix(b, []byte(pV))
	if !ok || len(rest) < IDLen {
		return Event{}, false
	}
	id := string(rest[:IDLen])
	if rest, ok = bytes.CutPrefix(rest[IDLen:], []byte(pSession)); !ok || len(rest) < IDLen {
		return Event{}, false
	}
	session := string(rest[:IDLen])
	if rest, ok = bytes.CutPrefix(rest[IDLen:], []byte(pKind)); !ok {
		return Event{}, false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 {
		return Event{}, false
	}
	kind := Kind(rest[:i])
	if rest, ok = bytes.CutPrefix(rest[i:], []byte(pTime)); !ok {
		return Event{}, false
	}
	if i = bytes.IndexByte(rest, '"'); i < 0 {
		return Event{}, false
	}
	ts := rest[:i]
	if rest, ok = bytes.CutPrefix(rest[i:], []byte(pPayload)); !ok || len(rest) < 3 || rest[len(rest)-1] != '}' {
		return Event{}, false
	}
	payload := rest[:len(rest)-1]
	// Validate below checks that the payload is exactly one JSON object
	// (the general decoder refuses trailing data).
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil || !bytes.HasSuffix(ts, []byte("Z")) {
		return Event{}, false
	}
	e := Event{V: EnvelopeVersion, ID: id, Session: session, Kind: kind, Time: t, Payload: json.RawMessage(payload)}
	if validate && e.Validate() != nil {
		return Event{}, false
	}
	return e, true
}

func decodeEventSlow(b []byte) (Event, error) {
	var e Event
	if err := decodeStrict(b, &e); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	if _, off := e.Time.Zone(); off != 0 {
		return Event{}, &ValidationError{"time", "not UTC"}
	}
	return e, nil
}

// validFramePayload requires exactly {"bytes":"<standard base64>"}.
func validFramePayload(p json.RawMessage) error {
	if compactFramePayload(p) {
		return nil
	}
	return validFramePayloadSlow(p)
}

// framePre and frameSuf enclose the base64 of a frame payload in the
// compact form json.Marshal and [AppendFramePayload] write.
const framePre, frameSuf = `{"bytes":"`, `"}`

// compactFramePayload reports whether p is exactly the compact form,
// checked without decoding the bytes.
func compactFramePayload(p []byte) bool {
	return len(p) >= len(framePre)+len(frameSuf) && string(p[:len(framePre)]) == framePre &&
		string(p[len(p)-len(frameSuf):]) == frameSuf && validBase64(p[len(framePre):len(p)-len(frameSuf)])
}

// AppendFramePayload appends the payload of a frame event holding b, the
// same bytes json.Marshal(FramePayload{Bytes: b}) gives, without reflection.
func AppendFramePayload(dst, b []byte) []byte {
	dst = append(dst, framePre...)
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, frameSuf...)
}

// FrameEnvelope returns a copy of data, a frame event as [Event.Encode] or
// [EncodeFrameEvent] wrote it, with the frame left out: the same envelope
// (version, id, session, kind, time) with the payload {"bytes":""}. It
// serves readers that fold frame events by their envelope alone. It
// reports false for data in any other layout.
func FrameEnvelope(data []byte) ([]byte, bool) {
	const pPayload = `","payload":`
	// The members before the payload are an id, a session, a kind and a
	// time, none of which can hold pPayload: its first occurrence ends
	// them.
	i := bytes.Index(data, []byte(pPayload))
	if i < 0 {
		return nil, false
	}
	head := data[:i+len(pPayload)]
	if !bytes.HasPrefix(data[len(head):], []byte(framePre)) || !bytes.HasSuffix(data, []byte(frameSuf+"}")) {
		return nil, false
	}
	out := make([]byte, 0, len(head)+len(framePre)+len(frameSuf)+1)
	out = append(out, head...)
	return append(out, framePre+frameSuf+"}"...), true
}

// FrameEventBound is an upper bound of len(e.Encode()) for a frame event
// e of kind whose payload holds n frame bytes and whose time lies in the
// years 0 to 9999. It exceeds the exact length by at most 10: the time
// omits trailing zeros of the fractional second, and the point with them.
// The store uses it to account for an envelope it builds later (see
// events.Store.EnqueueFrame).
func FrameEventBound(kind Kind, n int) int {
	const fixed = len(`{"v":`) + len(`,"id":"`) + IDLen + len(`","session":"`) + IDLen +
		len(`","kind":"`) + len(`","time":"`) + len("2006-01-02T15:04:05.999999999Z") +
		len(`","payload":`) + len(framePre) + len(frameSuf) + len(`}`)
	return fixed + len(strconv.Itoa(EnvelopeVersion)) + len(kind) + base64.StdEncoding.EncodedLen(n)
}

// validBase64 reports whether b is padded standard base64.
func validBase64(b []byte) bool {
	if len(b)%4 != 0 {
		return false
	}
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '+', c == '/':
		case c == '=' && i >= len(b)-2:
			if i == len(b)-2 && b[len(b)-1] != '=' {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func validFramePayloadSlow(p json.RawMessage) error {
	var m map[string]json.RawMessage
	if err := decodeStrict(p, &m); err != nil {
		return err
	}
	raw, ok := m["bytes"]
	if !ok || len(m) != 1 {
		return errors.New(`want exactly the member "bytes"`)
	}
	var b []byte
	if len(raw) == 0 || raw[0] != '"' {
		return errors.New(`"bytes" is not a base64 string`)
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return fmt.Errorf(`"bytes": %w`, err)
	}
	return nil
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
