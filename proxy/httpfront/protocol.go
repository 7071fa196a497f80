package httpfront

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The checks of the streamable HTTP transport that the go-sdk's own
// [mcp.StreamableHTTPHandler] makes before its transport serves a
// request, and that the front, which serves each session's transport
// itself, makes alike: the same request gets the same status from both.

// batchesRemoved is the first protocol version without JSON-RPC batches.
const batchesRemoved = "2025-06-18"

// accepts reports which of JSON and an event stream r's Accept takes, as
// the go-sdk reads it: media types without their parameters, wildcards
// included.
func accepts(r *http.Request) (json, stream bool) {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			switch strings.ToLower(strings.TrimSpace(mt)) {
			case "application/json", "application/*":
				json = true
			case "text/event-stream", "text/*":
				stream = true
			case "*/*":
				json, stream = true, true
			}
		}
	}
	return json, stream
}

// getHeaders checks a GET's Accept, which must take an event stream: a
// GET opens one and nothing else.
func getHeaders(w http.ResponseWriter, r *http.Request) bool {
	if _, stream := accepts(r); !stream {
		refuse(w, http.StatusBadRequest, "Accept must contain text/event-stream for a GET, which opens an event stream")
		return false
	}
	return true
}

// noBatch refuses a POST whose body is a JSON-RPC batch under a protocol
// version that has none (2025-06-18 and later, as its MCP-Protocol-Version
// header says; without one the transport assumes 2025-03-26, which has
// batches). It looks only at the body's first byte that is not white
// space, and leaves the body whole for the transport.
func noBatch(w http.ResponseWriter, r *http.Request) bool {
	v := r.Header.Get("Mcp-Protocol-Version")
	if v == "" || v < batchesRemoved || r.Body == nil {
		return true
	}
	br := bufio.NewReaderSize(r.Body, 512)
	r.Body = struct {
		io.Reader
		io.Closer
	}{br, r.Body}
	for {
		b, err := br.Peek(1)
		if err != nil {
			return true // an empty or unreadable body: the transport says so
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			br.ReadByte()
			continue
		case '[':
			refuse(w, http.StatusBadRequest, fmt.Sprintf("a JSON-RPC batch: MCP has none from protocol version %s on (this request's is %s); send one message a request", batchesRemoved, v))
			return false
		}
		return true
	}
}
