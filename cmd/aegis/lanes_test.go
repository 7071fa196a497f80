package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
)

// Sessions at once each get a record file of their own; a new one goes
// to the first lane no session holds (one this process gave back, or
// past a lane that another writer holds), and this process does not try
// the lanes its own sessions hold, so the nth session at once opens one
// file, not n.
func TestLanesGiveEachSessionItsOwnRecordFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := events.Open(ctx, events.Config{Dir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	rec := projector.SessionConfig{Store: st, Key: projector.InsecureDevKey(), AuditPath: filepath.Join(dir, "calls.aarl")}
	ln := newLanes()
	type open struct {
		sess *projector.Session
		free func()
	}
	var opened []open
	want := func(path string, tries int) {
		t.Helper()
		before := ln.tries
		sess, p, free, err := ln.open(ctx, rec, nil)
		if n := ln.tries - before; n != tries {
			t.Errorf("%d record files tried for %s, want %d", n, path, tries)
		}
		if err != nil {
			t.Fatal(err)
		}
		if p != path {
			t.Errorf("lane %s, want %s", p, path)
		}
		opened = append(opened, open{sess, free})
	}
	want(rec.AuditPath, 1)
	want(lanePath(rec.AuditPath, 2), 1)
	want(lanePath(rec.AuditPath, 3), 1)
	if len(ln.busy) != 3 {
		t.Errorf("%d lanes held, want 3", len(ln.busy))
	}

	// The second ends: the next session continues its file.
	if err := opened[1].sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	opened[1].free()
	opened[1].free() // twice is once
	want(lanePath(rec.AuditPath, 2), 1)

	// A writer the lanes do not know of holds lane 4: it is passed over,
	// and given back at once.
	cfg := rec
	cfg.AuditPath = lanePath(rec.AuditPath, 4)
	foreign, err := projector.OpenSession(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want(lanePath(rec.AuditPath, 5), 2)
	if ln.busy[4] {
		t.Error("a lane that another writer holds stays marked as this process's")
	}
	for _, o := range append(opened, open{foreign, func() {}}) {
		if o.sess != nil && o.sess != opened[1].sess {
			if err := o.sess.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		o.free()
	}
	if len(ln.busy) != 0 {
		t.Errorf("lanes still held after every session ended: %v", ln.busy)
	}
}
