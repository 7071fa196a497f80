package proxy

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/aegis-dev/aegis/proxy/rpc"
)

// noteHost registers the tools/list requests of a host frame as the relay
// does: from its reading of the frame (Classify's Request.List).
func noteHost(w *ListWatch, frame string) {
	for _, q := range rpc.Classify([]byte(frame)).Requests {
		if q.List != "" {
			w.Add(NewReqID(q.Key, q.ID), q.List, q.Cursor)
		}
		if q.Init {
			w.Add(NewReqID(q.Key, q.ID), "initialize", false)
		}
	}
}

// A tools/list answer is matched to the host's request as hosts match it:
// an answer with id "1" answers request 1 (and 1.0), so a server cannot
// slip a listing past the pins by answering with the id in another form.
// What readers could take two ways is never read as one listing: it is
// unreadable (why), and the pins hold the server's calls.
func TestListWatchMatchesIDsAsHostsDo(t *testing.T) {
	for _, tc := range []struct {
		name, request, answer string
		matched               bool
		continued, more       bool
		unreadable            bool
	}{
		{"exact", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"}]}}`, true, false, false, false},
		{"a string id answers a number", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":"1","result":{"tools":[]}}`, true, false, false, false},
		{"1.0 answers 1", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1.0,"result":{"tools":[]}}`, true, false, false, false},
		{"in a batch", `[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","id":"b","method":"tools/list","params":{"cursor":"2"}}]`,
			`[{"jsonrpc":"2.0","id":"b","result":{"tools":[],"nextCursor":"3"}}]`, true, true, true, false},
		{"an escaped method is tools/list", `{"jsonrpc":"2.0","id":1,"method":"tools\/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`, true, false, false, false},
		{"a result in another case is unreadable", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
			`{"jsonrpc":"2.0","id":1,"RESULT":{"tools":[{"name":"evil"}]}}`, true, false, false, true},
		{"an id in another case is unreadable", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
			`{"jsonrpc":"2.0","ID":1,"result":{"tools":[{"name":"evil"}]}}`, false, false, false, true},
		{"a method in another case is a listing to a server that folds case", `{"jsonrpc":"2.0","id":1,"METHOD":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`, true, false, false, false},
		{"another request's answer", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}`, false, false, false, false},
		{"not a listing", `{"jsonrpc":"2.0","id":1,"method":"resources/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`, false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w ListWatch
			noteHost(&w, tc.request)
			pages, why := w.answers([]byte(tc.answer))
			unreadable := why != ""
			for _, p := range pages {
				unreadable = unreadable || p.why != ""
			}
			if unreadable != tc.unreadable {
				t.Fatalf("unreadable %v (%q, %+v), want %v", unreadable, why, pages, tc.unreadable)
			}
			if (len(pages) == 1) != tc.matched {
				t.Fatalf("pages %+v, want matched %v", pages, tc.matched)
			}
			if tc.matched && (pages[0].continued != tc.continued || pages[0].more != tc.more) {
				t.Fatalf("page %+v", pages[0])
			}
			if again, _ := w.answers([]byte(tc.answer)); len(again) != 0 {
				t.Fatal("a second answer to one request was read as a listing")
			}
		})
	}
}

// The listing attacks: each reads as one listing to some host and another
// (or none) to aegis's old shortcuts. Now each is read as every reader
// reads it, or marked unreadable.
func TestListWatchReadsTheListingEveryHostReads(t *testing.T) {
	deep := func(n int) string {
		s := ""
		for range n {
			s += "["
		}
		for range n {
			s += "]"
		}
		return s
	}
	for _, tc := range []struct {
		name, answer string
		tools        []string // names read
		bad          []string // of those, the ones that cannot be pinned
		listingWhy   bool     // the whole listing unreadable
	}{
		{"tools behind an escaped member name", `{"jsonrpc":"2.0","id":1,"result":{"tool\u0073":[{"name":"a"}]}}`, []string{"a"}, nil, false},
		{"tools in another case", `{"jsonrpc":"2.0","id":1,"result":{"Tools":[{"name":"a"}]}}`, nil, nil, true},
		{"tools given twice", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"}],"tools":[{"name":"b"}]}}`, nil, nil, true},
		{"a result given twice", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"first"}]},"result":{"tools":[{"name":"last"}]}}`, nil, nil, true},
		{"a name given twice", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","name":"b"}]}}`, nil, nil, true},
		{"annotations nested past every decoder", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","annotations":` + deep(10001) + `}]}}`, nil, nil, true},
		{"annotations nested past MaxDepth", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","annotations":` + deep(300) + `}]}}`, []string{"a"}, []string{"a"}, false},
		{"a number beyond the double range", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","annotations":{"x":1e400}}]}}`, []string{"a"}, []string{"a"}, false},
		{"a member given twice inside a tool", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","description":"x","description":"y"}]}}`, []string{"a"}, []string{"a"}, false},
		{"an entry without a name crashes nothing", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{},{"name":"a"}]}}`, []string{"a"}, nil, false},
		{"one tool listed twice", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","description":"x"},{"name":"a"}]}}`, []string{"a", "a"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w ListWatch
			noteHost(&w, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			pages, why := w.answers([]byte(tc.answer))
			if len(pages) == 1 && why == "" {
				why = pages[0].why
			}
			if (why != "") != tc.listingWhy {
				t.Fatalf("listing why %q, want unreadable %v", why, tc.listingWhy)
			}
			if tc.listingWhy {
				return
			}
			if len(pages) != 1 {
				t.Fatalf("pages %+v", pages)
			}
			var names, bad []string
			for _, e := range pages[0].tools {
				names = append(names, e.name)
				if e.seen.bad != "" {
					bad = append(bad, e.name)
				}
			}
			if len(names) != len(tc.tools) || len(bad) != len(tc.bad) {
				t.Fatalf("tools %v (bad %v), want %v (bad %v)", names, bad, tc.tools, tc.bad)
			}
		})
	}
}

// FuzzListWatchAnswers: whatever a server answers a tools/list with, the
// watcher never panics, and a listing it reads without marking anything
// unreadable names the tools encoding/json finds in the same text (a
// reader that agrees with the reading on every unambiguous text).
func FuzzListWatchAnswers(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"},{"name":"b","_meta":{"x":1}}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tool\u0073":[{"name":"a"}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"Tools":[{"name":"a"}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","annotations":{"x":1e400}}]}}`,
		`[{"jsonrpc":"2.0","id":1,"result":{"tools":[],"nextCursor":"x"}}]`,
		`{"jsonrpc":"2.0","id":"1","result":{"tools":[{"name":"a"},{"name":"a"}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		// The other answers the pins read crash nothing either.
		for _, method := range []string{"prompts/list", "resources/templates/list", "initialize"} {
			var w ListWatch
			noteHost(&w, `{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":{"capabilities":{}}}`)
			w.answers(text)
		}
		var w ListWatch
		noteHost(&w, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		pages, why := w.answers(text)
		if why != "" || len(pages) != 1 || pages[0].why != "" {
			return
		}
		var m struct {
			Result *struct {
				Tools []struct {
					Name *string `json:"name"`
				} `json:"tools"`
			} `json:"result"`
		}
		if json.Unmarshal(text, &m) != nil || m.Result == nil {
			return // not one JSON text to encoding/json (a batch, say)
		}
		var want []string
		for _, tl := range m.Result.Tools {
			if tl.Name != nil && *tl.Name != "" {
				want = append(want, *tl.Name)
			}
		}
		var got []string
		for _, e := range pages[0].tools {
			got = append(got, e.name)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%q: the pins read tools %q, encoding/json %q", text, got, want)
		}
	})
}
