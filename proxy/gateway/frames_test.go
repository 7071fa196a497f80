package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/aegis-dev/aegis/proxy"
	"github.com/aegis-dev/aegis/proxy/reading"
)

// filterAll runs in through a frameFilter that takes every line for which
// want says so, reading in chunks of the sizes chunk gives, and returns what
// passed and what was taken.
func filterAll(t testing.TB, in string, half bool, want func(line []byte) bool) (string, []string) {
	var taken []string
	var r io.Reader = strings.NewReader(in)
	if half {
		r = iotest.HalfReader(r)
	}
	f := &frameFilter{r: r, take: func(text []byte, rd reading.Reading) bool {
		if want(text) {
			taken = append(taken, string(text))
			return true
		}
		return false
	}}
	out, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), taken
}

// isTaskCall reports whether text reads as a task-augmented call.
func isTaskCall(text []byte) bool {
	r := readRPC(text)
	task, _ := r.params.Get("task")
	return r.method == "tools/call" && task != nil
}

// The frame filter shows take whole values, as a continuous JSON reader
// above it reads them, so what it answers itself and what the SDK answers
// never overlap: a value split over lines is one value, shown once.
func TestFrameFilterTakesOnlyWholeFrames(t *testing.T) {
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","task":{}}}`
	for _, tc := range []struct {
		name, in, pass string
		taken          int
	}{
		{"a task frame alone is taken", call + "\n", "", 1},
		{"frames around it pass in order", "{\"a\":1}\n" + call + "\n{\"b\":2}\n", "{\"a\":1}\n{\"b\":2}\n", 1},
		{"a frame without its newline at the end is taken", call, "", 1},
		{"a task frame inside a value split over lines is not taken",
			"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"x\",\"params\":\n" + call + "\n}\n",
			"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"x\",\"params\":\n" + call + "\n}\n", 0},
		{"a task frame whose lines are split inside a string is taken whole",
			"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"x\",\n\"task\":{}}}\n", "", 1},
		{"after the split value ends, frames are taken again",
			"{\"a\":\n1}\n" + call + "\n", "{\"a\":\n1}\n", 1},
		{"two values on one line are shown as one text", "{}{}\n" + call + "\n", "{}{}\n", 1},
		{"a line that is not JSON does not stop taking", "garbage\n" + call + "\n", "garbage\n", 1},
		{"a task frame split over lines is taken whole, as the reader above reads it",
			"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\n\"params\":{\"task\":{}}}\n", "", 1},
		{"a value left incomplete at the end passes", "{\"a\":\n[1,\n", "{\"a\":\n[1,\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, half := range []bool{false, true} {
				pass, taken := filterAll(t, tc.in, half, isTaskCall)
				if pass != tc.pass || len(taken) != tc.taken {
					t.Errorf("half=%v: passed %q, took %d; want %q and %d", half, pass, len(taken), tc.pass, tc.taken)
				}
			}
		})
	}
}

// A line longer than MaxFrame is passed through as it comes, not held.
func TestFrameFilterPassesOverlongLine(t *testing.T) {
	long := `{"task":"` + strings.Repeat("x", proxy.MaxFrame+10) + `"}` + "\n"
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","task":{}}}` + "\n"
	pass, taken := filterAll(t, long+call, false, isTaskCall)
	if pass != long || len(taken) != 1 {
		t.Errorf("passed %d bytes, took %d", len(pass), len(taken))
	}
}

// Whatever the input and however it is split, nothing is lost or added:
// the bytes that pass and the lines taken add up to the input.
func FuzzFrameFilter(f *testing.F) {
	f.Add([]byte(`{"task":1}` + "\n" + `{"a":` + "\n" + `{"task":2}}` + "\n"))
	f.Add([]byte(`[{"task":1}]{"task":2}`))
	f.Add([]byte("\n\n{\"task\":\"\\n\"}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		took := 0
		f := &frameFilter{r: iotest.OneByteReader(bytes.NewReader(in)), take: func(text []byte, rd reading.Reading) bool {
			if !bytes.Contains(text, []byte(`"task"`)) || !json.Valid(text) {
				return false
			}
			took += len(text)
			return true
		}}
		out, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(out)+took != len(in) {
			t.Fatalf("passed %d and took %d bytes of %d: %q", len(out), took, len(in), out)
		}
	})
}

// A value split over very many lines is read once it may be whole, not at
// each line: a host that sends one call over 300 000 lines (or one
// ']' at a time, without a newline) costs the gateway a reading of it,
// not 300 000 readings of a growing text. Read at each line, this test
// runs for many minutes.
func TestFrameFilterReadsASplitValueOnce(t *testing.T) {
	const n = 300_000
	split := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","task":{},"arguments":{"a":[` + "\n" +
		strings.Repeat("1,\n", n) + "1]}}}\n"
	pass, taken := filterAll(t, split+`{"jsonrpc":"2.0","id":2,"method":"ping"}`+"\n", false, isTaskCall)
	if len(taken) != 1 || taken[0] != split || pass != `{"jsonrpc":"2.0","id":2,"method":"ping"}`+"\n" {
		t.Fatalf("took %d texts, passed %q", len(taken), pass)
	}
	// Many closers, one byte at a time, no newline after the last.
	nested := "[" + strings.Repeat("[],", n) + "[]]"
	var out bytes.Buffer
	shown := 0
	f := &frameFilter{r: iotest.OneByteReader(strings.NewReader(nested)), take: func(text []byte, rd reading.Reading) bool {
		shown++
		return false
	}}
	if _, err := io.Copy(&out, f); err != nil {
		t.Fatal(err)
	}
	if out.String() != nested || shown != 1 {
		t.Fatalf("passed %d of %d bytes, shown %d times", out.Len(), len(nested), shown)
	}
}
