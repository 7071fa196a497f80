package projector

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// A rotation seals every record file the stream knows of into a segment,
// with a signed checkpoint beside it, and rolls the stream over
// ([events.Store.BeginRoll]). The live record file starts empty, and the
// first session written to it links to the segment's last line through
// prev_session_tail, so the chain goes on across files: the segments and
// the live file, in order, verify as one record.
//
// Nothing is deleted: the record's lines move to the segment (a rename, so
// the bytes are those the stream acknowledged and the checks compared),
// and the stream moves, whole, into an archive of the state directory.

// Rotation is what a rotation sealed: the detail of its store.rotated
// event, and of its plan while it runs.
type Rotation struct {
	Records []SealedRecord `json:"records"`
	// Anchor is the state directory's anchor log with the segments'
	// checkpoints appended (anchor.go); nil when it has none.
	Anchor  *AnchorSeal `json:"anchor,omitempty"`
	Argv    []string    `json:"argv,omitempty"`
	Version string      `json:"version,omitempty"`
}

// SealedRecord is one record file at a rotation.
type SealedRecord struct {
	// Path is the live record file (absolute, resolved).
	Path string `json:"path"`
	// SealedAs is the segment its lines were moved to; empty when it held
	// none since the rotation before (its tail is carried over).
	SealedAs string `json:"sealed_as,omitempty"`
	Lines    int64  `json:"lines"`
	Bytes    int64  `json:"bytes"`
	// Tail is the hash of the record's last line: the prev_session_tail of
	// the next session written to Path.
	Tail string `json:"tail"`
	// Root is the hex RFC 6962 root over the segment's lines, and
	// Checkpoint the signed note over it, also written to
	// SealedAs+".checkpoint".
	Root       string `json:"root,omitempty"`
	Checkpoint string `json:"checkpoint,omitempty"`
}

// RotationInfo is the rotation that began the stream, as the index folded
// it.
type RotationInfo struct {
	At       events.Position   `json:"at"`
	Time     time.Time         `json:"time"`
	Stream   events.StreamRoll `json:"stream"`
	Rotation Rotation          `json:"rotation"`
}

// sealed returns what the rotation said of path.
func (r *RotationInfo) sealed(path string) (SealedRecord, bool) {
	if r == nil {
		return SealedRecord{}, false
	}
	for _, s := range r.Rotation.Records {
		if s.Path == path {
			return s, true
		}
	}
	return SealedRecord{}, false
}

// foldRotation folds a store.rotated event.
func (ix *Index) foldRotation(rec events.Record) {
	var p events.RollPlan
	if json.Unmarshal(rec.Event.Payload, &p) != nil {
		return
	}
	var r Rotation
	if json.Unmarshal(p.Detail, &r) != nil {
		return
	}
	ix.rotation = &RotationInfo{At: rec.Pos, Time: rec.Event.Time, Stream: p.Stream, Rotation: r}
	ix.filesNew = true
}

// Rotation returns the rotation that began the stream, or nil.
func (ix *Index) Rotation() *RotationInfo { return ix.rotation }

// SegmentName returns the segment path of the n-th rotation of the record
// file at path: the counter goes before the extension (audit.jsonl,
// audit.000001.jsonl), or after the name if it has none.
func SegmentName(path string, n int) string {
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	if ext == base {
		ext = ""
	}
	return filepath.Join(dir, fmt.Sprintf("%s.%06d%s", strings.TrimSuffix(base, ext), n, ext))
}

// CheckpointSuffix names the checkpoint beside a segment.
const CheckpointSuffix = ".checkpoint"

// nextSegment returns the first segment name of path that neither a
// segment nor a checkpoint (nor a sidecar of checkpoints) holds yet.
func nextSegment(path string) (string, error) {
	for n := 1; n < 1_000_000; n++ {
		s := SegmentName(path, n)
		_, err1 := os.Lstat(s)
		_, err2 := os.Lstat(s + CheckpointSuffix)
		_, err3 := os.Lstat(s + CheckpointsSuffix)
		if errors.Is(err1, os.ErrNotExist) && errors.Is(err2, os.ErrNotExist) && errors.Is(err3, os.ErrNotExist) {
			return s, nil
		}
	}
	return "", fmt.Errorf("no free segment name for %s", path)
}

// PlanRotation checks every record file the stream knows of and returns
// what a rotation seals: each file is first brought up to date with the
// stream ([Index.CatchUp]) and checked whole ([Index.CheckFile]), and a
// checkpoint over its lines is signed with key. A record file that does
// not hold what the stream says was written to it is an error; nothing is
// sealed then. ix must be folded to the stream's end.
func (ix *Index) PlanRotation(ctx context.Context, st *events.Store, key PrivateKey) (Rotation, error) {
	var paths []string
	for p, spans := range ix.byPath {
		if len(spans) > 0 {
			paths = append(paths, p)
		}
	}
	if ix.rotation != nil {
		for _, s := range ix.rotation.Rotation.Records {
			if !slices.Contains(paths, s.Path) {
				paths = append(paths, s.Path)
			}
		}
	}
	slices.Sort(paths)
	var r Rotation
	for _, path := range paths {
		if err := ctx.Err(); err != nil {
			return Rotation{}, err
		}
		tail, end, err := ix.CatchUp(ctx, st, path)
		if err != nil {
			return Rotation{}, err
		}
		if err := ix.CheckFile(ctx, path); err != nil {
			return Rotation{}, err
		}
		if end == 0 {
			// Nothing since the rotation before: carry its tail over.
			if tail != "" {
				r.Records = append(r.Records, SealedRecord{Path: path, Tail: tail})
			}
			continue
		}
		if !ix.keyWrote(path, key.KeyID()) {
			return Rotation{}, fmt.Errorf("the signing key %s did not sign any session of %s; sign its checkpoint with the key that wrote it (verify checks a checkpoint against the keys the record publishes)", key.KeyID(), path)
		}
		seg, err := nextSegment(path)
		if err != nil {
			return Rotation{}, err
		}
		note, cp, err := CheckpointFile(ctx, key, path, CheckpointOrigin(key, seg))
		if err != nil {
			return Rotation{}, fmt.Errorf("checkpoint %s: %w", path, err)
		}
		// The sessions' lines; a file that held lines before aegis first
		// recorded to it (taken as it was) holds more.
		lines := int64(0)
		for _, sp := range ix.byPath[path] {
			lines += int64(sp.Lines)
		}
		if cp.Size < lines || cp.Tail != tail {
			return Rotation{}, fmt.Errorf("%w: %s holds %d lines ending in %s, the stream says %d ending in %s",
				ErrRecordDiverged, path, cp.Size, cp.Tail, lines, tail)
		}
		r.Records = append(r.Records, SealedRecord{
			Path: path, SealedAs: seg, Lines: cp.Size, Bytes: end, Tail: tail,
			Root: hex.EncodeToString(cp.Root[:]), Checkpoint: string(note),
		})
	}
	return r, nil
}

// ApplySeals moves each record file of r to its segment and writes the
// checkpoint beside it. It can be run again after a crash: a step done
// before is skipped. It never replaces a file: a segment name that holds
// something else, or a live file that is neither the planned one nor
// gone, is an error.
func ApplySeals(r Rotation) error {
	for _, s := range r.Records {
		if s.SealedAs == "" {
			continue
		}
		if err := WriteCheckpointFile(s.SealedAs+CheckpointSuffix, []byte(s.Checkpoint)); err != nil {
			return fmt.Errorf("seal %s: %w", s.Path, err)
		}
		live, liveErr := os.Stat(s.Path)
		seg, segErr := os.Stat(s.SealedAs)
		switch {
		case segErr == nil:
			if seg.Size() != s.Bytes {
				return fmt.Errorf("seal %s: %s is %d bytes, the sealed record %d", s.Path, s.SealedAs, seg.Size(), s.Bytes)
			}
			if liveErr == nil {
				if !os.SameFile(live, seg) {
					return fmt.Errorf("seal %s: both it and %s exist and are different files", s.Path, s.SealedAs)
				}
				if err := os.Remove(s.Path); err != nil {
					return fmt.Errorf("seal %s: %w", s.Path, err)
				}
			}
		case errors.Is(segErr, os.ErrNotExist) && liveErr == nil:
			if live.Size() != s.Bytes {
				return fmt.Errorf("seal %s: it is %d bytes, the record checked was %d (written to since?)", s.Path, live.Size(), s.Bytes)
			}
			// A link never replaces a file; the rename is link then remove.
			if err := os.Link(s.Path, s.SealedAs); err != nil {
				return fmt.Errorf("seal %s: %w", s.Path, err)
			}
			if err := os.Remove(s.Path); err != nil {
				return fmt.Errorf("seal %s: %w", s.Path, err)
			}
		default:
			return fmt.Errorf("seal %s: neither it nor %s can be found (%v)", s.Path, s.SealedAs, errors.Join(liveErr, segErr))
		}
		if err := moveSidecar(s.Path+CheckpointsSuffix, s.SealedAs+CheckpointsSuffix); err != nil {
			return fmt.Errorf("seal %s: %w", s.Path, err)
		}
		syncDirOf(s.SealedAs)
	}
	return nil
}

// moveSidecar moves the live checkpoints of a record file along with it to
// its segment, by link and remove: they cover the segment's first lines,
// and the live file starts again from none. Run again after a crash, it
// finishes what it began.
func moveSidecar(from, to string) error {
	src, srcErr := os.Stat(from)
	dst, dstErr := os.Stat(to)
	switch {
	case errors.Is(srcErr, os.ErrNotExist):
		return nil
	case srcErr != nil:
		return srcErr
	case dstErr == nil:
		if !os.SameFile(src, dst) {
			return fmt.Errorf("both %s and %s exist and are different files", from, to)
		}
	case errors.Is(dstErr, os.ErrNotExist):
		if err := os.Link(from, to); err != nil {
			return err
		}
	default:
		return dstErr
	}
	return os.Remove(from)
}

func syncDirOf(path string) {
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
}

// RotationDetail decodes the detail of a rotation plan.
func RotationDetail(p *events.RollPlan) (Rotation, error) {
	var r Rotation
	if err := json.Unmarshal(p.Detail, &r); err != nil {
		return Rotation{}, fmt.Errorf("rotation detail: %w", err)
	}
	for _, s := range r.Records {
		if !filepath.IsAbs(s.Path) || s.SealedAs != "" && !filepath.IsAbs(s.SealedAs) || !schemas.IsDigest(s.Tail) {
			return Rotation{}, fmt.Errorf("rotation detail: record %q is not sound", s.Path)
		}
	}
	return r, nil
}

// keyWrote reports whether a session signed with keyID recorded to path.
func (ix *Index) keyWrote(path, keyID string) bool {
	for _, sp := range ix.byPath[path] {
		if en := ix.sessions.byID[sp.Session]; en != nil && en.sum.KeyID == keyID {
			return true
		}
	}
	return false
}
