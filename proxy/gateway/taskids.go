package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/aegis-dev/aegis/proxy/reading"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The task ids the host sees are the gateway's own. Servers choose their
// task ids each for itself, so two servers may well both call a task "t1";
// to the host they are two tasks, and neither server is ever asked about,
// or heard for, the other's. Invariants:
//
//   - A server's task gets a gateway id (32 hex digits from crypto/rand;
//     no two tasks of a process share one) when the server first names
//     it to the gateway: in its CreateTaskResult, or in a status or a
//     related-task _meta sent while a task-augmented call to it is in
//     flight (an "early" id, which the CreateTaskResult then takes over).
//   - The map is keyed by (server, the server's id) one way and by the
//     gateway id the other, so what a server says is only ever read as
//     naming a task of its own: no server can name, poll, cancel or
//     answer for another server's task.
//   - Bounded: maxTasks created tasks and maxEarlyTasks early ids; beyond
//     them the oldest is forgotten, and its id is then unknown (refused).
//   - The related-task _meta of what the SDK carries between a server
//     and the host (a server's requests and notifications, the host's
//     requests and their answers) is mapped after the SDK decoded it
//     (relatedMiddleware), however the server spelled or split its
//     frame; so is that of the frames the task layer carries itself. A
//     related task that cannot be mapped is removed.
//   - Where a task id is rewritten, every other spelling of its member
//     (another case) is removed, so a reader that matches names
//     case-insensitively reads the same id.

// relatedTaskKey is the _meta member that names the task a message
// belongs to.
const relatedTaskKey = "io.modelcontextprotocol/related-task"

// maxEarlyTasks bounds the ids given to tasks named before their
// CreateTaskResult arrived.
const maxEarlyTasks = 1024

// taskMap holds the tasks created through the gateway under the gateway's
// ids. Its methods are called with tasker.mu held.
type taskMap struct {
	created *taskTable[taskEntry] // gateway id -> task created through this gateway
	early   *taskTable[taskEntry] // gateway id -> task named before its creation was answered
	back    map[string]string     // server "\x00" server's id -> gateway id, of the entries above
}

func newTaskMap() *taskMap {
	return &taskMap{created: newTaskTable[taskEntry](maxTasks), early: newTaskTable[taskEntry](maxEarlyTasks), back: map[string]string{}}
}

func taskKey(server, id string) string { return server + "\x00" + id }

// newID returns a gateway task id that no task of this map has.
func (m *taskMap) newID() string {
	for {
		var b [16]byte
		rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		if _, ok := m.created.m[id]; !ok {
			if _, ok := m.early.m[id]; !ok {
				return id
			}
		}
	}
}

// create records the task e.server created as e.serverID, and returns the
// gateway's id of it: the early id when the server named it before, a new
// one otherwise (also when the server gives the id of a task it created
// before to a new task).
func (m *taskMap) create(e taskEntry) string {
	k := taskKey(e.server, e.serverID)
	id, ok := m.back[k]
	if _, done := m.created.m[id]; !ok || done {
		id = m.newID()
	}
	m.back[k] = id
	if old, ov, forgot := m.created.put(id, e); forgot && m.back[taskKey(ov.server, ov.serverID)] == old {
		delete(m.back, taskKey(ov.server, ov.serverID))
	}
	return id
}

// hostID returns the gateway's id of server's task serverID; with early,
// an unknown one gets an early id.
func (m *taskMap) hostID(server, serverID string, early bool) (string, bool) {
	if serverID == "" {
		return "", false
	}
	k := taskKey(server, serverID)
	if id, ok := m.back[k]; ok {
		return id, true
	}
	if !early {
		return "", false
	}
	id := m.newID()
	m.back[k] = id
	if old, ov, forgot := m.early.put(id, taskEntry{server: server, serverID: serverID}); forgot {
		// An early id the CreateTaskResult took over stays.
		if _, created := m.created.m[old]; !created && m.back[taskKey(ov.server, ov.serverID)] == old {
			delete(m.back, taskKey(ov.server, ov.serverID))
		}
	}
	return id, true
}

// idMapper maps a task id from one side's to the other's, and reports
// whether it could.
type idMapper func(id string) (string, bool)

// setMember sets obj's member name to v (nil: removes it), removing every
// other spelling of name.
func setMember(obj map[string]json.RawMessage, name string, v json.RawMessage) {
	for k := range obj {
		if strings.EqualFold(k, name) {
			delete(obj, k)
		}
	}
	if v != nil {
		obj[name] = v
	}
}

// mapRelated rewrites the related-task _meta of obj (a message's params
// or result) with to; a related task that to cannot map is removed. It
// reports whether it changed obj.
func mapRelated(obj map[string]json.RawMessage, to idMapper) bool {
	changed := false
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !strings.EqualFold(k, "_meta") {
			continue
		}
		var meta map[string]json.RawMessage
		if json.Unmarshal(obj[k], &meta) != nil || meta == nil {
			continue
		}
		var rel json.RawMessage
		found := false
		for _, mk := range slices.Sorted(maps.Keys(meta)) {
			if strings.EqualFold(mk, relatedTaskKey) {
				rel, found = meta[mk], true // any: it is read in server's namespace
			}
		}
		if !found {
			continue
		}
		setMember(meta, relatedTaskKey, nil)
		var r map[string]json.RawMessage
		if id, ok := to(taskIDOf(rel)); ok && json.Unmarshal(rel, &r) == nil && r != nil {
			b, _ := json.Marshal(id)
			setMember(r, "taskId", b)
			meta[relatedTaskKey], _ = json.Marshal(r)
		}
		obj[k], _ = json.Marshal(meta)
		changed = true
	}
	return changed
}

// mapTask returns obj (a task, or a message's params or result) with its
// taskId, when it has one, and its related-task _meta mapped by to. A
// taskId that to cannot map is an error: the answer is not passed on.
func mapTask(obj json.RawMessage, to idMapper) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil || m == nil {
		return obj, true
	}
	has := false
	for k := range m {
		has = has || strings.EqualFold(k, "taskId")
	}
	if has {
		id, ok := to(taskIDOf(obj))
		if !ok {
			return nil, false
		}
		b, _ := json.Marshal(id)
		setMember(m, "taskId", b)
	}
	mapRelated(m, to)
	b, err := json.Marshal(m)
	if err != nil {
		return nil, false
	}
	return b, true
}

// mapCreated returns a CreateTaskResult with its task's id, and the
// related-task _meta, mapped by to.
func mapCreated(result json.RawMessage, to idMapper) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(result, &m) != nil || m == nil {
		return result, true
	}
	var task json.RawMessage
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if strings.EqualFold(k, "task") {
			task = m[k]
		}
	}
	if task != nil {
		t, ok := mapTask(task, to)
		if !ok {
			return nil, false
		}
		setMember(m, "task", t)
	}
	mapRelated(m, to)
	b, err := json.Marshal(m)
	return b, err == nil
}

// mayNameTask reports whether b may hold a related-task _meta: it names
// one, or has escapes that could spell one.
func mayNameTask(b []byte) bool {
	return bytes.Contains(b, []byte("related-task")) || bytes.Contains(b, []byte(`\u`))
}

// relatedToHost returns obj (params or a result of server's) with its
// related-task _meta naming the gateway's id of the task, or without it
// when the task is none of server's the gateway knows.
func (t *tasker) relatedToHost(server string, obj json.RawMessage) json.RawMessage {
	if !mayNameTask(obj) {
		return obj
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil || m == nil {
		return obj
	}
	t.mu.Lock()
	early := t.creating[server] > 0
	changed := mapRelated(m, func(id string) (string, bool) { return t.tasks.hostID(server, id, early) })
	t.mu.Unlock()
	if !changed {
		return obj
	}
	b, err := json.Marshal(m)
	if err != nil {
		return obj
	}
	return b
}

// metaToServer returns a host's _meta for a request to server with its
// related-task naming the server's own id of the task, or without it when
// the task is none of server's.
func (t *tasker) metaToServer(server string, meta map[string]any) map[string]any {
	m, _ := metaMapped(meta, func(gid string) (string, bool) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if e, ok := t.tasks.created.m[gid]; ok && e.server == server {
			return e.serverID, true
		}
		return "", false
	})
	return m
}

// relatedMiddleware maps the related-task _meta of what the SDK carries
// between server and the host: of a server's request or notification
// (incoming) to the gateway's id of the server's task, and of the host's
// answer to it back to the server's own id; of a request to the server
// (!incoming) to the server's own id, and of its answer back to the
// gateway's. A related task that cannot be mapped is removed.
func (t *tasker) relatedMiddleware(server string, incoming bool) mcp.Middleware {
	toHost := func(id string) (string, bool) {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.tasks.hostID(server, id, t.creating[server] > 0)
	}
	toServer := func(gid string) (string, bool) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if e, ok := t.tasks.created.m[gid]; ok && e.server == server {
			return e.serverID, true
		}
		return "", false
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p := req.GetParams(); p != nil && !isNilParams(p) {
				to := toServer
				if incoming {
					to = toHost
				}
				if m, ok := metaMapped(p.GetMeta(), to); ok {
					p.SetMeta(m)
				}
			}
			res, err := next(ctx, method, req)
			if hasMeta(res) {
				to := toHost
				if incoming {
					to = toServer
				}
				if m, ok := metaMapped(res.GetMeta(), to); ok {
					res.SetMeta(m)
				}
			}
			return res, err
		}
	}
}

// hasMeta reports whether res is a result that carries _meta between a
// server and the host (the SDK's empty result, say, has none to read).
func hasMeta(res mcp.Result) bool {
	switch r := res.(type) {
	case *mcp.CallToolResult:
		return r != nil
	case *mcp.ElicitResult:
		return r != nil
	case *mcp.CreateMessageResult:
		return r != nil
	case *mcp.CreateMessageWithToolsResult:
		return r != nil
	case *mcp.ListRootsResult:
		return r != nil
	}
	return false
}

func isNilParams(p mcp.Params) bool {
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// metaMapped returns meta with its related task mapped by to (removed when
// to cannot map it), and whether meta names one at all.
func metaMapped(meta map[string]any, to idMapper) (map[string]any, bool) {
	named := false
	for k := range meta {
		named = named || strings.EqualFold(k, relatedTaskKey)
	}
	if !named {
		return meta, false
	}
	b, err := json.Marshal(map[string]any{"_meta": meta})
	if err != nil {
		return meta, false
	}
	var m map[string]json.RawMessage
	json.Unmarshal(b, &m)
	mapRelated(m, to)
	var out map[string]any
	json.Unmarshal(m["_meta"], &out)
	if out == nil {
		out = map[string]any{}
	}
	return out, true
}

// taskIDOf returns the taskId member of a JSON object (a request's params,
// a task), or "" when it has none that every reader reads the same.
func taskIDOf(obj json.RawMessage) string {
	v, ok := reading.Read(obj).One()
	if !ok {
		return ""
	}
	return taskIDIn(v)
}

// taskIDIn returns the taskId member of an object as read, or "" when it
// has none that every reader reads the same.
func taskIDIn(v *reading.Value) string {
	id, _ := strMember(v, "taskId")
	return id
}

// createdTaskID returns the task id of a CreateTaskResult, or "" for any
// other result.
func createdTaskID(result json.RawMessage) string {
	task, ok := memberAt(result, "task")
	if !ok {
		return ""
	}
	return taskIDIn(task)
}

// cancelledKey returns the requestId of notifications/cancelled params,
// keyed as the SDK keys ids, or "" when it has none every reader reads
// the same.
func cancelledKey(params *reading.Value) string {
	id, why := params.Get("requestId")
	if why != "" || id == nil {
		return ""
	}
	return idKeyOf(id)
}

// maxTasks bounds the tasks a gateway remembers, each way: a session that
// creates more forgets the oldest, whose ids are then refused as unknown
// (fail closed), so that a long session holds no more than this.
const maxTasks = 10000

// taskTable maps task ids to what the gateway knows of them, forgetting
// the oldest beyond its limit.
type taskTable[V any] struct {
	m     map[string]V
	order []string // ids, oldest first
	limit int
}

func newTaskTable[V any](limit int) *taskTable[V] {
	return &taskTable[V]{m: map[string]V{}, limit: limit}
}

// put sets id's value, and returns the id and value it forgot to make
// room, if it did.
func (t *taskTable[V]) put(id string, v V) (old string, ov V, forgot bool) {
	if _, ok := t.m[id]; !ok {
		t.order = append(t.order, id)
		if len(t.order) > t.limit {
			old, ov, forgot = t.order[0], t.m[t.order[0]], true
			delete(t.m, old)
			t.order = t.order[1:]
		}
	}
	t.m[id] = v
	return old, ov, forgot
}
