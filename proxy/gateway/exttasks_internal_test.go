package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A host that has the gateway run many tasks of the extension cannot grow
// the results kept for tasks/get past their bound: the oldest finished
// tasks are forgotten first, a task still working never is, and the
// bytes counted go back to what is kept.
func TestExtensionTasksKeepTheirResultsWithinTheBound(t *testing.T) {
	g := &gateway{}
	g.initTasks(context.Background())
	tk := g.tk
	tk.extLimit = 100
	result := json.RawMessage(`"` + strings.Repeat("r", 38) + `"`) // 40 bytes
	add := func(i int) *extTask {
		tk.mu.Lock()
		defer tk.mu.Unlock()
		x := &extTask{e: taskEntry{server: "s", serverID: fmt.Sprint(i)}, asks: map[string]*ask{}, answered: map[string]bool{}}
		x.gid = tk.tasks.create(x.e)
		tk.extAddLocked(x)
		return x
	}
	working := add(0)
	var done []*extTask
	for i := 1; i <= 5; i++ {
		x := add(i)
		tk.extDone(x, "completed", result, nil)
		done = append(done, x)
	}
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if tk.ext[working.gid] == nil {
		t.Error("a task still working was forgotten")
	}
	for i, x := range done {
		_, kept := tk.ext[x.gid]
		if want := i >= len(done)-2; kept != want {
			t.Errorf("finished task %d kept %v, want %v (the newest two fit in 100 bytes)", i+1, kept, want)
		}
	}
	if tk.extBytes != 80 || len(tk.extOrder) != 3 {
		t.Errorf("%d bytes counted over %d tasks, want 80 over 3", tk.extBytes, len(tk.extOrder))
	}
}
