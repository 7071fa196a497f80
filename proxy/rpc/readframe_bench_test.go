package rpc

import "testing"

// BenchmarkReadFrame is what reading one frame costs the relay: a host
// ping and a tools/call (both directions' readings), and a server answer.
func BenchmarkReadFrame(b *testing.B) {
	for _, bc := range []struct {
		name string
		line string
		host bool
	}{
		{"host-ping", `{"jsonrpc":"2.0","id":17,"method":"ping"}` + "\n", true},
		{"host-call", `{"jsonrpc":"2.0","id":18,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}}` + "\n", true},
		{"server-ping-answer", `{"jsonrpc":"2.0","id":17,"result":{}}` + "\n", false},
		{"server-answer", `{"jsonrpc":"2.0","id":18,"result":{"content":[{"type":"text","text":"hello"}]}}` + "\n", false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			line := []byte(bc.line)
			b.ReportAllocs()
			for b.Loop() {
				if bc.host {
					ReadHostFrame(Stream{}, line, true)
				} else {
					ReadServerFrame(Stream{}, line)
				}
			}
		})
	}
}
