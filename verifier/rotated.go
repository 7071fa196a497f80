package verifier

import (
	"crypto/ed25519"
	"fmt"
	"io"
)

// Rotated records. aegis seals a live record file by renaming it to a
// segment (audit.jsonl to audit.000001.jsonl) and writing a signed
// checkpoint next to it; the next session written to the live file opens
// with prev_session_tail set to the segment's last line hash, so the chain
// runs on across files. [VerifySet] walks the files, oldest segment first
// and the live file last, as one record:
//
//   - the walk is the one [Verify] makes over the files' lines in order, so
//     an open that starts a file must link to the last line of the file
//     before it: a segment left out, or files in the wrong order, break
//     that link (SessionBoundaryBroken);
//   - a file that another follows must end in '\n': a torn last line there
//     is MalformedLine, never joined to the next file's first line; only the
//     last file's last line may be a torn write (TornFinalLine);
//   - a file with a checkpoint must hold exactly what the checkpoint seals
//     (see [CheckCheckpoint]), checked when the walk has read the whole file
//     and before it goes on to the next; the signing keys are those of the
//     sessions whose lines the file holds and the pinned ones;
//   - messages name the file: "audit.000002.jsonl line 17".
//
// The walk streams each file once, and the tree root is computed as the
// lines go by in O(log n) memory. A checkpoint can be deleted by whoever can
// edit the record, so a file without one is only checked by the chain.

// Segment is one record file of a rotated set, for [VerifySet].
type Segment struct {
	// Name names the file in messages and output, e.g. "audit.000001.jsonl".
	Name string
	// Record reads the file.
	Record io.Reader
	// Checkpoint is the file's signed checkpoint note, nil when it has
	// none.
	Checkpoint []byte
	// CheckpointName names the checkpoint in messages and output, e.g.
	// "audit.000001.jsonl.checkpoint".
	CheckpointName string
	// Checkpoints opens the file's checkpoints of its first lines (see
	// prefix.go): the sidecar aegis writes beside a record it is writing,
	// RECORD.checkpoints, or a file of such notes. nil when it has none.
	// It is opened twice.
	Checkpoints func() (io.ReadCloser, error)
	// CheckpointsName names them in messages and output.
	CheckpointsName string
}

// VerifySet verifies the record files of a rotated record, oldest first, as
// one record (see the notes above), with the same options and verdicts as
// [Verify]; Result.Checkpoints says which checkpoints were checked. A read
// error is returned in Result.Err, naming the file.
func VerifySet(segs []Segment, opts Options) Result {
	return verifySet(segs, opts, defaultConfig())
}

func verifySet(segs []Segment, opts Options, cfg parallelConfig) Result {
	w := newWalker(opts)
	pinned := opts.trustedKeys()
	var (
		keys = &keyPass{}
		cps  []CheckpointResult
	)
	for i, s := range segs {
		w.file, w.fileKeys = s.Name, nil
		if w.sess != nil && !w.sess.closed && !w.orphan {
			// The file may go on with the session the previous one
			// ended in.
			w.fileKeys = append(w.fileKeys, w.sess.pub)
		}
		fw := &fileWalk{final: i == len(segs)-1, keys: keys}
		if s.Checkpoint != nil || s.Checkpoints != nil {
			fw.tree = &leafTree{}
		}
		var watch *prefixWatch
		if s.Checkpoints != nil {
			rc, err := s.Checkpoints()
			if err != nil {
				return Result{Err: fmt.Errorf("read %s: %w", s.CheckpointsName, err)}
			}
			watch = newPrefixWatch(rc, s.CheckpointsName, s.Name)
			fw.tree.watch = watch
			err = w.walkParallel(s.Record, cfg, fw)
			rc.Close()
			if err != nil {
				return Result{Err: fmt.Errorf("read %s: %w", s.Name, err)}
			}
		} else if err := w.walkParallel(s.Record, cfg, fw); err != nil {
			return Result{Err: fmt.Errorf("read %s: %w", s.Name, err)}
		}
		if w.tampered != nil {
			break
		}
		if !fw.final && fw.noNL {
			w.tamper(MalformedLine, fw.lines, "%s does not end in a newline: its last line (%s) is torn, and a record file that another follows must end in a whole line",
				display(s.Name), w.at(fw.lines))
			break
		}
		if watch != nil {
			keys := append(w.fileKeys[:len(w.fileKeys):len(w.fileKeys)], pinned...)
			inWriting := fw.final && (w.sess == nil || !w.sess.closed)
			res, reason := checkPrefixes(watch, fw.tree.n, s, keys, inWriting)
			cps = append(cps, res)
			if reason != nil {
				w.tampered = reason
				break
			}
		}
		if s.Checkpoint == nil {
			continue
		}
		cp, signer, err := checkCheckpoint(s.Checkpoint, append(w.fileKeys[:len(w.fileKeys):len(w.fileKeys)], pinned...),
			fw.tree.n, fw.tree.root(), fw.tail, s.Name, s.CheckpointName)
		cps = append(cps, CheckpointResult{Name: s.CheckpointName, File: s.Name, Checkpoint: cp, Signer: signer, Matches: err == nil})
		if err != nil {
			w.tampered = err.(*Reason)
			break
		}
	}
	r := w.finish()
	r.Checkpoints = cps
	return r
}

// checkPrefixes finishes the checks of a file of checkpoints of the record
// file's first lines, after the walk read the n lines of the file. A last
// note cut short is one being appended when the record is in writing
// (the last file, its session not closed), and is left for the next
// verify; in any other record it is BadCheckpoint.
func checkPrefixes(watch *prefixWatch, n int64, s Segment, keys []ed25519.PublicKey, inWriting bool) (CheckpointResult, *Reason) {
	res := CheckpointResult{Name: s.CheckpointsName, File: s.Name, Checkpoint: watch.last, Count: watch.count, Prefix: true}
	if watch.torn != nil && !inWriting {
		watch.bad("%s after its %d checkpoints does not read as signed notes: %v", display(watch.name), watch.count, watch.torn)
	}
	watch.end(n)
	if watch.fail != nil {
		return res, watch.fail
	}
	rc, err := s.Checkpoints()
	if err != nil {
		return res, &Reason{Code: BadCheckpoint, Message: fmt.Sprintf("%s could not be read again: %v", display(s.CheckpointsName), err), File: s.Name}
	}
	defer rc.Close()
	signer, reason := watch.checkSignatures(rc, keys)
	if reason != nil {
		return res, reason
	}
	res.Signer, res.Matches = signer, true
	return res, nil
}
