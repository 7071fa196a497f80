package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/aegis-dev/aegis/proxy/reading"
)

// compactJSON is b without insignificant white space, or b as it is when
// it is not JSON.
func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

// list answers tasks/list with the tasks created through this gateway, as
// their servers list them.
func (t *tasker) list(ctx context.Context) (any, error) {
	t.mu.Lock()
	mine := map[string]map[string]string{} // server -> its task id -> the gateway's
	for id, e := range t.tasks.created.m {
		if t.tasks.back[taskKey(e.server, e.serverID)] != id {
			continue // the server gave its id to a later task
		}
		if mine[e.server] == nil {
			mine[e.server] = map[string]string{}
		}
		mine[e.server][e.serverID] = id
	}
	t.mu.Unlock()
	cctx, release := t.g.callContext(ctx)
	defer release()
	tasks := []json.RawMessage{}
	for _, n := range sortedKeys(mine) {
		d := t.g.downs[n]
		if d == nil || d.raw == nil || !t.serverCan(n, "list") {
			continue
		}
		var cursor string
		for range maxTaskPages {
			params := map[string]any{}
			if cursor != "" {
				params["cursor"] = cursor
			}
			raw, err := d.raw.call(cctx, "tasks/list", params)
			if err != nil {
				return nil, err
			}
			res, ok := memberAt(raw)
			page, why := res.Get("tasks")
			if !ok || why != "" || page != nil && page.Kind != reading.Array && page.Kind != reading.Null {
				return nil, fmt.Errorf("server %s answered tasks/list with tasks that JSON readers read differently or that are no list", n)
			}
			var elems []*reading.Value
			if page != nil {
				elems = page.Elems
			}
			for _, task := range elems {
				gid, ok := mine[n][taskIDIn(task)]
				if !ok {
					continue
				}
				if out, ok := mapTask(json.RawMessage(task.Raw), func(string) (string, bool) { return gid, true }); ok {
					tasks = append(tasks, out)
				}
			}
			if next, ok := memberAt(raw, "nextCursor"); ok {
				cursor, _ = next.String()
			} else {
				cursor = ""
			}
			if cursor == "" {
				break
			}
		}
	}
	return map[string]any{"tasks": tasks}, nil
}

// maxTaskPages bounds the pages of one server's tasks/list.
const maxTaskPages = 100
