package projector

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// Live checkpoints. While a session writes a record file, the file's lines
// are the leaves of an RFC 6962 tree in file order, as for a sealed
// segment, and the session signs a checkpoint of the file as it stands
// every CheckpointPolicy.Lines lines or CheckpointPolicy.Interval, and at
// Close. A checkpoint covers only lines already written to the file, and
// goes first to the stream, as a record.checkpoint event, then, once that
// is durable, to the sidecar file next to the record (RECORD +
// [CheckpointsSuffix]): signed notes, one after another, each followed by
// an empty line. The record's own lines are unchanged.
//
// The event also carries the tree's state (its size, the bytes of the
// file it covers and the roots of its complete subtrees), which the index
// keeps per session; the next session on the file resumes the tree from
// the last one and reads only the lines written after it, never the file
// from its start.

// CheckpointsSuffix names the sidecar file of a record's live checkpoints.
const CheckpointsSuffix = ".checkpoints"

// Checkpoint defaults.
const (
	DefaultCheckpointLines    = 1024
	DefaultCheckpointInterval = 10 * time.Second
)

// CheckpointPolicy says how often a session checkpoints its record file.
type CheckpointPolicy struct {
	// Lines: a checkpoint once this many lines were written since the
	// last (0: DefaultCheckpointLines).
	Lines int
	// Interval: a checkpoint this long after the first line that no
	// checkpoint covers yet (0: DefaultCheckpointInterval).
	Interval time.Duration
	// Off turns live checkpoints off.
	Off bool
}

func (p CheckpointPolicy) lines() int64 {
	if p.Lines <= 0 {
		return DefaultCheckpointLines
	}
	return int64(p.Lines)
}

func (p CheckpointPolicy) interval() time.Duration {
	if p.Interval <= 0 {
		return DefaultCheckpointInterval
	}
	return p.Interval
}

// TreeState is the RFC 6962 tree over a record file's first Size lines:
// the roots of its complete subtrees, largest first (one per set bit of
// Size, hex), and Bytes, how much of the file those lines are.
type TreeState struct {
	Size     int64    `json:"size"`
	Bytes    int64    `json:"bytes"`
	Frontier []string `json:"frontier"`
}

// RecordCheckpoint is the payload of a record.checkpoint event.
type RecordCheckpoint struct {
	AuditPath string `json:"audit_path"`
	Origin    string `json:"origin"`
	// Root is the tree root (base64, as in the note), Tail the hash of the
	// last line covered.
	Root string `json:"root"`
	Tail string `json:"tail,omitempty"`
	// Note is the signed checkpoint.
	Note string `json:"note"`
	TreeState
	// Anchor is the checkpoint's leaf in the state directory's anchor
	// log, when the session appends to one (anchor.go).
	Anchor *AnchorEntry `json:"anchor,omitempty"`
}

// frontierHashes returns the kept hashes of t, largest subtree first.
func (t *TreeHasher) frontierHashes() []string {
	var out []string
	for level := 62; level >= 0; level-- {
		if t.n&(1<<level) != 0 {
			h := t.stored[tlog.StoredHashIndex(level, t.n>>level-1)]
			out = append(out, hex.EncodeToString(h[:]))
		}
	}
	return out
}

// resumeTree returns the tree hasher of a [TreeState].
func resumeTree(st TreeState) (*TreeHasher, error) {
	t := &TreeHasher{n: st.Size, stored: map[int64]tlog.Hash{}}
	i := 0
	for level := 62; level >= 0; level-- {
		if st.Size&(1<<level) == 0 {
			continue
		}
		if i >= len(st.Frontier) {
			return nil, fmt.Errorf("tree state of %d lines has %d subtree roots", st.Size, len(st.Frontier))
		}
		b, err := hex.DecodeString(st.Frontier[i])
		if err != nil || len(b) != len(tlog.Hash{}) {
			return nil, fmt.Errorf("tree state: subtree root %q is not a hash", st.Frontier[i])
		}
		t.stored[tlog.StoredHashIndex(level, st.Size>>level-1)] = tlog.Hash(b)
		i++
	}
	if i != len(st.Frontier) || st.Size < 0 || st.Bytes < 0 {
		return nil, fmt.Errorf("tree state of %d lines has %d subtree roots", st.Size, len(st.Frontier))
	}
	return t, nil
}

// liveCheckpoints signs the checkpoints of one session's record file. Its
// methods run under the file projection's write lock.
type liveCheckpoints struct {
	store   *events.Store
	session string
	key     PrivateKey
	path    string
	origin  string
	policy  CheckpointPolicy
	anchor  *Anchor // nil: checkpoints are not anchored

	tree    *TreeHasher
	bytes   int64  // of the file, covered by tree
	tail    string // hash of the last line in tree
	signed  int64  // tree size at the last checkpoint
	pending time.Time
	sidecar *os.File
	failed  error
	timer   *time.Timer
}

// resumeCheckpoints returns the tree of the record file at path, which
// holds end bytes, the bytes it covers and its last line's hash: the tree
// is resumed from st (nil: from the file's start) and fed the lines after
// it, so only a file that no checkpoint covers yet is read whole.
func resumeCheckpoints(path string, st *TreeState, end int64) (*TreeHasher, int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, "", err
	}
	defer f.Close()
	tree, from := &TreeHasher{}, int64(0)
	if st != nil && st.Bytes <= end {
		if tree, err = resumeTree(*st); err != nil {
			return nil, 0, "", err
		}
		from = st.Bytes
	}
	tail := ""
	_, err = eachLine(context.Background(), io.NewSectionReader(f, from, end-from), func(line []byte) error {
		tail = schemas.HashHex(line)
		return tree.Add(line)
	})
	if err != nil {
		return nil, 0, "", err
	}
	return tree, end, tail, nil
}

// add feeds one line written to the file.
func (c *liveCheckpoints) add(line []byte, now time.Time) {
	if c.failed != nil {
		return
	}
	if err := c.tree.Add(line); err != nil {
		c.fail(err)
		return
	}
	c.bytes += int64(len(line)) + 1
	c.tail = schemas.HashHex(line)
	if c.pending.IsZero() {
		c.pending = now
	}
}

// due reports whether the lines written since the last checkpoint call
// for one now.
func (c *liveCheckpoints) due(now time.Time) bool {
	n := c.tree.Size() - c.signed
	return c.failed == nil && n > 0 && (n >= c.policy.lines() || now.Sub(c.pending) >= c.policy.interval())
}

// checkpoint signs the tree as it stands, waits until its event is
// durable and appends the note to the sidecar. The file must hold every
// line added (flushed). Nothing is done when no line came since the last.
func (c *liveCheckpoints) checkpoint(ctx context.Context) {
	if c.failed != nil || c.tree.Size() == c.signed {
		return
	}
	root, err := c.tree.Root()
	if err != nil {
		c.fail(err)
		return
	}
	cp := schemas.Checkpoint{Origin: c.origin, Size: c.tree.Size(), Root: root, Tail: c.tail}
	note, err := SignCheckpoint(c.key, cp)
	if err != nil {
		c.fail(err)
		return
	}
	payload := RecordCheckpoint{
		AuditPath: c.path, Origin: c.origin, Root: base64.StdEncoding.EncodeToString(root[:]), Tail: c.tail, Note: string(note),
		TreeState: TreeState{Size: cp.Size, Bytes: c.bytes, Frontier: c.tree.frontierHashes()},
	}
	commit := func() (events.Position, error) {
		ev, err := c.store.NewEvent(c.session, schemas.KindRecordCheckpoint, payload)
		if err != nil {
			return events.Position{}, err
		}
		r, err := c.store.Enqueue(ev)
		if err != nil {
			return events.Position{}, err
		}
		return r.Wait(ctx)
	}
	if c.anchor != nil {
		// The leaf and the anchor's new checkpoint are in the same event:
		// durable together, before the note reaches the sidecar.
		err = c.anchor.Append(ctx, note, func(e AnchorEntry) (events.Position, error) {
			payload.Anchor = &e
			return commit()
		})
	} else {
		_, err = commit()
	}
	if err != nil {
		c.fail(fmt.Errorf("record the checkpoint: %w", err))
		return
	}
	if c.sidecar == nil {
		if c.sidecar, _, err = openPrivateAppend(c.path+CheckpointsSuffix, sidecarWhat, sidecarInto); err != nil {
			c.fail(err)
			return
		}
	}
	if _, err := c.sidecar.Write(append(note, '\n')); err != nil {
		c.fail(err)
		return
	}
	c.signed, c.pending = cp.Size, time.Time{}
}

func (c *liveCheckpoints) fail(err error) {
	if c.failed == nil {
		c.failed = fmt.Errorf("checkpoint %s: %w", c.path, err)
	}
}

// close syncs and closes the sidecar.
func (c *liveCheckpoints) close() error {
	if c.timer != nil {
		c.timer.Stop()
	}
	err := c.failed
	if c.sidecar != nil {
		if serr := c.sidecar.Sync(); serr != nil && err == nil {
			err = serr
		}
		if cerr := c.sidecar.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}
