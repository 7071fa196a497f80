package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/cmd/aegis/console"
	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/verifier"
)

// The console's Records section: each record file the state directory's
// index knows, with what aegis verify says of it. A check reads the whole
// record (its sealed segments, oldest first, and the live file, with their
// checkpoints), since the verifier cannot go on from a prefix it checked
// before. So a file is checked in the background, one at a time, only
// when it changed (its files' device, inode, size, modification and
// change times, and those of its checkpoint files), and at most once every
// recheck (console --recheck-every, recordEvery by default); the page shows when each check began and how many lines it
// read.
const (
	// recordEvery is the least time between two checks of one record
	// unless --recheck-every says otherwise.
	recordEvery = 10 * time.Second
	// recordEveryMin bounds --recheck-every from below: each check reads
	// the whole record.
	recordEveryMin = time.Second
	// recordListEvery is how often the list of record files is read again
	// from the index.
	recordListEvery = 10 * time.Second
	// recordRoundGap is the least time between two rounds of checks.
	recordRoundGap = time.Second
)

// recordChecker checks the record files of a state directory in the
// background, as the open pages ask for them.
type recordChecker struct {
	ctx      context.Context // the console's; its end stops a check
	stateDir string
	every    time.Duration // the least time between two checks of a record

	mu      sync.Mutex
	running bool
	ended   time.Time // when the last round ended
	listed  time.Time // when the files were listed
	list    recordList
	stale   string // why the list could not be read again, "" when it was
	checks  map[string]*recordCheck
}

// recordList is what the index says of the record files.
type recordList struct {
	paths []string                   // in the order of their first session
	keys  map[string]map[string]bool // path: the key_ids its sessions signed with
	// sealed are the paths that the rotation which began the stream
	// sealed: their earlier sessions are not in the stream.
	sealed map[string]bool
	err    error
}

// recordCheck is the last check of one record.
type recordCheck struct {
	stamp string
	at    time.Time
	row   console.RecordRow
}

func newRecordChecker(ctx context.Context, stateDir string, every time.Duration) *recordChecker {
	return &recordChecker{ctx: ctx, stateDir: stateDir, every: every, checks: map[string]*recordCheck{}}
}

// Records lists the record files with their last check, and starts the
// next round of checks in the background.
func (s *consoleSource) Records(context.Context) ([]console.RecordRow, []string, error) {
	return s.records.rows()
}

func (c *recordChecker) rows() ([]console.RecordRow, []string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running && time.Since(c.ended) >= recordRoundGap {
		c.running = true
		go c.round()
	}
	var notes []string
	switch {
	case errors.Is(c.list.err, events.ErrNoIndex):
		notes = append(notes, fmt.Sprintf("records: no index in %s yet (aegis wrap and gateway save one as they record)", c.stateDir))
	case c.list.err != nil:
		return nil, nil, fmt.Errorf("the index of %s: %w", c.stateDir, c.list.err)
	case c.listed.IsZero():
		notes = append(notes, "records: listing the record files…")
	case len(c.list.paths) == 0:
		notes = append(notes, fmt.Sprintf("records: no session in %s has recorded yet", c.stateDir))
	default:
		notes = append(notes, fmt.Sprintf("records: checked as 'aegis verify' checks them, with their segments and checkpoints, in the background: each when it changed, at most every %v", c.every))
	}
	if c.stale != "" {
		notes = append(notes, c.stale)
	}
	rows := make([]console.RecordRow, 0, len(c.list.paths))
	for _, p := range c.list.paths {
		if ck := c.checks[p]; ck != nil {
			rows = append(rows, ck.row)
			continue
		}
		rows = append(rows, console.RecordRow{Path: p, Status: "not checked yet"})
	}
	return rows, notes, nil
}

// round lists the record files when that is due, then checks each one
// that changed since its last check, if that was c.every ago.
func (c *recordChecker) round() {
	defer func() {
		c.mu.Lock()
		c.running, c.ended = false, time.Now()
		c.mu.Unlock()
	}()
	c.mu.Lock()
	// An empty or failed list is read again at once: the index appears
	// within a second of a session's start.
	due := time.Since(c.listed) >= recordListEvery || c.list.err != nil || c.stale != "" || len(c.list.paths) == 0
	c.mu.Unlock()
	if due {
		l := listRecords(c.stateDir)
		c.mu.Lock()
		switch {
		case l.err != nil && len(c.list.paths) > 0:
			// A save of the index under way, say: keep the list read
			// before, and say so.
			c.stale = fmt.Sprintf("records: the index of %s could not be read again (%v); the list is the one read at %s", c.stateDir, l.err, console.FormatTime(c.listed))
		default:
			c.list, c.listed, c.stale = l, time.Now(), ""
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	list := c.list
	c.mu.Unlock()
	for _, p := range list.paths {
		if c.ctx.Err() != nil {
			return
		}
		files, stamp := recordFiles(p)
		c.mu.Lock()
		ck := c.checks[p]
		switch {
		case ck != nil && ck.stamp == stamp:
			ck.row.Changed = false
			c.mu.Unlock()
			continue
		case ck != nil && time.Since(ck.at) < c.every:
			ck.row.Changed = true
			c.mu.Unlock()
			continue
		}
		c.mu.Unlock()
		at := time.Now()
		row := checkRecord(c.ctx, p, files, list.keys[p], list.sealed[p])
		if c.ctx.Err() != nil {
			return
		}
		row.CheckedAt = at.UTC().Format(time.RFC3339)
		c.mu.Lock()
		c.checks[p] = &recordCheck{stamp: stamp, at: at, row: row}
		c.mu.Unlock()
	}
}

// listRecords reads the record files and their sessions' keys from the
// index that aegis keeps in the state directory (the one a running aegis
// saves every second, or the last one saved).
func listRecords(stateDir string) recordList {
	ix, err := projector.ReadHeldIndex(stateDir)
	if err != nil {
		return recordList{err: err}
	}
	l := recordList{keys: map[string]map[string]bool{}, sealed: map[string]bool{}}
	add := func(p string) {
		if l.keys[p] == nil {
			l.keys[p] = map[string]bool{}
			l.paths = append(l.paths, p)
		}
	}
	if r := ix.Rotation(); r != nil {
		for _, s := range r.Rotation.Records {
			add(s.Path)
			l.sealed[s.Path] = true
		}
	}
	for _, sp := range ix.Spans() {
		add(sp.Path)
	}
	for _, s := range ix.Sessions(0) {
		if s.AuditPath != "" && s.KeyID != "" {
			add(s.AuditPath)
			l.keys[s.AuditPath][s.KeyID] = true
		}
	}
	return l
}

// recordFiles returns the files of the record whose live file is live, as
// aegis verify takes them (its sealed segments oldest first, then the
// live file), and a stamp of them and their checkpoint files that changes
// with any write.
func recordFiles(live string) (files []string, stamp string) {
	for n := 1; n < 1_000_000; n++ {
		seg := projector.SegmentName(live, n)
		_, err1 := os.Lstat(seg)
		_, err2 := os.Lstat(seg + projector.CheckpointSuffix)
		if errors.Is(err1, os.ErrNotExist) && errors.Is(err2, os.ErrNotExist) {
			break
		}
		if err1 == nil {
			files = append(files, seg)
		}
	}
	files = append(files, live)
	var b strings.Builder
	for _, f := range files {
		for _, name := range []string{f, f + projector.CheckpointsSuffix, f + projector.CheckpointSuffix} {
			fmt.Fprintf(&b, "%s:%s;", name, fileStamp(name))
		}
	}
	return files, b.String()
}

// fileStamp is what the kernel says of a file that a write changes.
func fileStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "-"
	}
	st, ok := projector.StampOf(fi)
	if !ok {
		return fmt.Sprintf("%d/%d", fi.Size(), fi.ModTime().UnixNano())
	}
	return fmt.Sprintf("%d/%d/%d/%d/%d", st.Dev, st.Ino, st.Size, fi.ModTime().UnixNano(), st.Ctime)
}

// checkRecord verifies the files of one record as aegis verify FILES…
// does, with the checkpoints it picks up beside them. The verdict is
// pinned to the keys that the record's sessions in the state directory
// signed with (keys, by key_id, as the index has them): when every key
// the record publishes is one of them it reads as aegis verify --key
// prints it; otherwise it stays unpinned, and the note says which key is
// not one of them.
func checkRecord(ctx context.Context, path string, files []string, keys map[string]bool, sealed bool) console.RecordRow {
	row := console.RecordRow{Path: path, Files: len(files)}
	var lines int64
	segs := make([]verifier.Segment, len(files))
	written := map[string]time.Time{} // the checkpoint files: when last written
	for i, f := range files {
		name := f // named in messages as aegis verify FILE names it
		segs[i].Name = name
		// The live checkpoints as they are now, before the record is
		// opened: the verifier reads them twice, and a running session
		// appends to them, but only checkpoints of lines it wrote before.
		side := f + projector.CheckpointsSuffix
		if fi, err := os.Stat(side); err == nil {
			segs[i].Checkpoints, segs[i].CheckpointsName = openerUpTo(side, fi.Size()), side
			written[side] = fi.ModTime()
		}
		r, err := os.Open(f)
		if err != nil {
			row.Verdict, row.Status = "Unreadable", "read record: "+err.Error()
			return row
		}
		defer r.Close()
		segs[i].Record = &lineCounter{r: ctxReader{ctx, r}, n: &lines}
		if fi, err := os.Stat(f + projector.CheckpointSuffix); err == nil {
			if b, err := readCheckpoint(f + projector.CheckpointSuffix); err == nil {
				segs[i].Checkpoint, segs[i].CheckpointName = b, name+projector.CheckpointSuffix
				written[segs[i].CheckpointName] = fi.ModTime()
			}
		}
	}
	var res verifier.Result
	if len(segs) == 1 && segs[0].Checkpoint == nil && segs[0].Checkpoints == nil {
		res = verifier.Verify(segs[0].Record, verifier.Options{})
	} else {
		res = verifier.VerifySet(segs, verifier.Options{})
	}
	row.Lines = lines
	if res.Err != nil {
		row.Verdict, row.Status = "Unreadable", "read record: "+res.Err.Error()
		return row
	}
	row.Verdict, row.Status = res.Verdict.String(), verifier.Label(res)
	var foreign []string
	for _, k := range res.KeyIDs {
		if !keys[k] {
			foreign = append(foreign, k)
		}
	}
	switch {
	case len(foreign) > 0:
		row.Note = fmt.Sprintf("key_id %s signed sessions of this record, but no session in this state directory's index did, so the verdict is unpinned", strings.Join(foreign, ", "))
		if sealed {
			row.Note += " (the sessions before the last rotation are not in the index)"
		}
	case res.Verdict == verifier.Verified && len(res.KeyIDs) == 1:
		row.Status = "Verified (pinned to " + res.KeyIDs[0] + ")"
	case res.Verdict == verifier.Verified && len(res.KeyIDs) > 1:
		row.Status = "Verified (pinned)"
	}
	if n := len(res.Checkpoints); n > 0 {
		c := res.Checkpoints[n-1]
		if c.Checkpoint.Size > 0 || c.Count > 0 {
			cp := &console.RecordCheckpoint{Name: c.Name, Size: c.Checkpoint.Size, Root: base64.StdEncoding.EncodeToString(c.Checkpoint.Root[:]), Count: c.Count, Matches: c.Matches}
			if t, ok := written[c.Name]; ok {
				cp.Time = t.UTC().Format(time.RFC3339)
			}
			row.Checkpoint = cp
		}
	}
	return row
}

// openerUpTo opens path and reads its first n bytes.
func openerUpTo(path string, n int64) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(f, n), f}, nil
	}
}

// ctxReader reads r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// lineCounter counts the lines read through it into *n.
type lineCounter struct {
	r io.Reader
	n *int64
}

func (l *lineCounter) Read(p []byte) (int, error) {
	k, err := l.r.Read(p)
	*l.n += int64(bytes.Count(p[:k], []byte{'\n'}))
	return k, err
}
