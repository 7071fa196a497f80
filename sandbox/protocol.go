package sandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// HelperArg is the hidden subcommand that runs [HelperMain]: the proxy
// starts "/proc/self/exe __confine-exec -- PROG ARGS...".
const HelperArg = "__confine-exec"

// File descriptors of the helper protocol, as the helper sees them.
const (
	// ControlFD carries the profile (one JSON line), then the go-ahead
	// byte, from the proxy to the helper.
	ControlFD = 3
	// ReportFD carries the fact (one JSON line) from the helper to the
	// proxy, then, only if exec fails, one line {"exec_error": "..."}.
	ReportFD = 4
)

// Exit statuses of the helper when it does not exec.
const (
	// ExitRefused: a refusal was reported, the protocol failed, or the
	// go-ahead never came. Nothing was executed.
	ExitRefused = 125
	// ExitExecFailed: the go-ahead came and exec itself failed.
	ExitExecFailed = 127
)

const (
	goAhead    byte = 'G'
	maxMessage      = 1 << 20
)

// execReport is the report line that follows the fact when exec fails.
type execReport struct {
	ExecError string `json:"exec_error"`
}

// readLine reads one newline-terminated message of at most maxMessage
// bytes. It returns io.EOF when the peer closed before sending anything.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxMessage {
			return nil, fmt.Errorf("message longer than %d bytes", maxMessage)
		}
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// decodeStrict decodes one JSON message, refusing unknown fields and
// trailing data.
func decodeStrict(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after message")
	}
	return nil
}

func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
