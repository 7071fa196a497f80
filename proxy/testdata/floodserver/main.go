// Command floodserver is a test fixture: an MCP server that floods its
// host with large frames, as a hostile or broken server might.
//
// By default it writes notifications/message frames of -size bytes each
// (one line, a JSON string of 'x' padding) to stdout as fast as stdout
// takes them, for -count frames (0: no limit) or until -duration has passed
// (0: no limit), then exits 0; at stdin EOF it exits at once.
//
// With -answers it writes nothing unprompted: it answers every request
// line it reads (a JSON object with an id) with a result of -size bytes,
// and exits 0 at stdin EOF.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"io"
	"os"
	"time"
)

func main() {
	size := flag.Int("size", 8<<20, "bytes per frame, without the newline")
	count := flag.Int("count", 0, "frames to write (0: no limit)")
	duration := flag.Duration("duration", 0, "stop writing after this long (0: no limit)")
	answers := flag.Bool("answers", false, "answer each request with a frame of -size bytes instead")
	flag.Parse()

	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	if *answers {
		br := bufio.NewReaderSize(os.Stdin, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			var req struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(line, &req) == nil && len(req.ID) > 0 {
				head := `{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"content":[{"type":"text","text":"`
				if _, werr := w.Write(frame(head, *size)); werr != nil || w.Flush() != nil {
					os.Exit(1)
				}
			}
			if err != nil {
				return
			}
		}
	}

	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	f := frame(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`, *size)
	var deadline time.Time
	if *duration > 0 {
		deadline = time.Now().Add(*duration)
	}
	for n := 0; *count == 0 || n < *count; n++ {
		if !deadline.IsZero() && time.Now().After(deadline) {
			break
		}
		if _, err := w.Write(f); err != nil {
			os.Exit(1)
		}
		if err := w.Flush(); err != nil {
			os.Exit(1)
		}
	}
}

// frame returns head, 'x' padding, and the closing `"}]}}` or `"}}` so
// that the line is size bytes, then '\n'.
func frame(head string, size int) []byte {
	tail := `"}}`
	if head[len(head)-8:] == `"text":"` {
		tail = `"}]}}`
	}
	pad := max(size-len(head)-len(tail), 0)
	b := make([]byte, 0, len(head)+pad+len(tail)+1)
	b = append(b, head...)
	for range pad {
		b = append(b, 'x')
	}
	b = append(b, tail...)
	return append(b, '\n')
}
