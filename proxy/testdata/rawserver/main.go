// Command rawserver is a test fixture: a JSON-RPC responder over stdio that
// answers at the byte level, so tests control exactly what a server does.
//
// Every request (an object with a method and an id) is answered with
// {"jsonrpc":"2.0","id":<the id, verbatim>,"result":{"method":<method>}},
// a batch array with an array of answers, except tools/call by tool name:
//
//	die    exit 3 at once, without answering
//	hang   never answer
//	fail   answer with a JSON-RPC error
//	loose  answer with the id as a JSON string ("1" for 1), which hosts
//	       that match ids by Number(id) take as the answer
//	forge  first answer arguments.id (default 424242), which the host
//	       never sent or was refused, then answer
//	twice  answer twice
//	split  answer in two lines, the first ending inside the answer object
//	huge   answer with a frame of 17 MiB, over the relay's 16 MiB limit
//
// Unparseable lines get no answer. At stdin EOF it exits 0, or with -linger
// it waits to be killed (a server that ignores the host leaving). With -log
// FILE it appends every line it receives to FILE, so a test can tell what
// reached the server.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type req struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string `json:"name"`
		Arguments struct {
			ID json.RawMessage `json:"id"`
		} `json:"arguments"`
	} `json:"params"`
}

func main() {
	linger := flag.Bool("linger", false, "ignore stdin EOF and SIGTERM")
	logPath := flag.String("log", "", "append every line received to this file")
	flag.Parse()
	var logf *os.File
	if *logPath != "" {
		var err error
		if logf, err = os.OpenFile(*logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
			os.Exit(4)
		}
	}
	if *linger {
		signal.Ignore(syscall.SIGTERM)
	}
	out := bufio.NewWriter(os.Stdout)
	br := bufio.NewReaderSize(os.Stdin, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if logf != nil && len(line) > 0 {
			logf.Write(line)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if resp := answer(bytes.TrimSpace(line)); resp != nil {
				out.Write(resp)
				out.WriteByte('\n')
				out.Flush()
			}
		}
		if err != nil {
			break
		}
	}
	if *linger {
		for {
			time.Sleep(time.Hour)
		}
	}
}

func answer(line []byte) []byte {
	if line[0] == '[' {
		var elems []json.RawMessage
		if json.Unmarshal(line, &elems) != nil {
			return nil
		}
		var outs []json.RawMessage
		for _, e := range elems {
			if r := one(e); r != nil {
				outs = append(outs, r)
			}
		}
		if len(outs) == 0 {
			return nil
		}
		b, _ := json.Marshal(outs)
		return b
	}
	return one(line)
}

func one(b []byte) []byte {
	var r req
	if json.Unmarshal(b, &r) != nil || r.Method == "" || len(r.ID) == 0 || string(r.ID) == "null" {
		return nil
	}
	if r.Method == "tools/call" {
		switch r.Params.Name {
		case "die":
			os.Exit(3)
		case "hang":
			return nil
		case "fail":
			return []byte(`{"jsonrpc":"2.0","id":` + string(r.ID) + `,"error":{"code":-32000,"message":"failed on purpose"}}`)
		case "loose":
			id, _ := json.Marshal(string(r.ID))
			return []byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"method":"tools/call"}}`)
		case "forge":
			forged := []byte("424242")
			if len(r.Params.Arguments.ID) > 0 {
				forged = r.Params.Arguments.ID
			}
			return []byte(`{"jsonrpc":"2.0","id":` + string(forged) + `,"result":{"forged":true}}` + "\n" + `{"jsonrpc":"2.0","id":` + string(r.ID) + `,"result":{"method":"tools/call"}}`)
		case "twice":
			a := `{"jsonrpc":"2.0","id":` + string(r.ID) + `,"result":{"method":"tools/call"}}`
			return []byte(a + "\n" + a)
		case "huge":
			return []byte(`{"jsonrpc":"2.0","id":` + string(r.ID) + `,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 17<<20) + `"}]}}`)
		case "split":
			return []byte(`{"jsonrpc":"2.0","id":` + string(r.ID) + `,"result":` + "\n" + `{"method":"tools/call"}}`)
		}
	}
	m, _ := json.Marshal(r.Method)
	return []byte(`{"jsonrpc":"2.0","id":` + string(r.ID) + `,"result":{"method":` + string(m) + `}}`)
}
