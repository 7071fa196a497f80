package proxy

import "testing"

// A tools/list answer is matched to the host's request as hosts match it:
// an answer with id "1" answers request 1 (and 1.0), so a server cannot
// slip a listing past the pins by answering with the id in another form.
func TestListWatchMatchesIDsAsHostsDo(t *testing.T) {
	for _, tc := range []struct {
		name, request, answer string
		matched               bool
		continued, more       bool
	}{
		{"exact", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"}]}}`, true, false, false},
		{"a string id answers a number", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":"1","result":{"tools":[]}}`, true, false, false},
		{"1.0 answers 1", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1.0,"result":{"tools":[]}}`, true, false, false},
		{"in a batch", `[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","id":"b","method":"tools/list","params":{"cursor":"2"}}]`,
			`[{"jsonrpc":"2.0","id":"b","result":{"tools":[],"nextCursor":"3"}}]`, true, true, true},
		{"a member named in another case is not the result", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
			`{"jsonrpc":"2.0","id":1,"RESULT":{"tools":[{"name":"evil"}]}}`, false, false, false},
		{"a method named in another case is not a listing", `{"jsonrpc":"2.0","id":1,"METHOD":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`, false, false, false},
		{"another request's answer", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}`, false, false, false},
		{"not a listing", `{"jsonrpc":"2.0","id":1,"method":"prompts/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w listWatch
			w.noteHost([]byte(tc.request))
			pages := w.answers([]byte(tc.answer))
			if (len(pages) == 1) != tc.matched {
				t.Fatalf("pages %+v, want matched %v", pages, tc.matched)
			}
			if tc.matched && (pages[0].continued != tc.continued || pages[0].more != tc.more) {
				t.Fatalf("page %+v", pages[0])
			}
			if again := w.answers([]byte(tc.answer)); len(again) != 0 {
				t.Fatal("a second answer to one request was read as a listing")
			}
		})
	}
}

// A result given twice, or once more in another case, is read as a host
// reads it: the last "result", exactly named; never the other.
func TestListWatchReadsTheResultAHostReads(t *testing.T) {
	var w listWatch
	w.noteHost([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	pages := w.answers([]byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"first"}]},"Result":{"tools":[{"name":"other"}]},"result":{"tools":[{"name":"last"}]}}`))
	if len(pages) != 1 || len(pages[0].tools) != 1 || string(pages[0].tools[0]) != `{"name":"last"}` {
		t.Fatalf("pages %+v", pages)
	}
}
