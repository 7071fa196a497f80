package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const proveUsage = `Usage:
  aegis prove inclusion --line N [--checkpoint FILE] RECORD
  aegis prove consistency OLD NEW RECORD
  aegis prove anchor --line N [--line M]… [--state-dir DIR] RECORD
  aegis prove anchor --vkey RECORD

Prints an RFC 6962 proof over a record's signed checkpoints, as one JSON
object on stdout, for 'aegis verify --proof FILE' or any RFC 6962
implementation to check without the record:

  inclusion    line N of RECORD (1-based, as verify counts) is in the
               tree of the checkpoint: by default the last one in
               RECORD.checkpoints, or the last note of --checkpoint FILE
               (a copy the hub or a colleague holds, say). The proof
               carries the line, its leaf hash, its index, the tree's
               size and root, the audit path and the signed checkpoint.
  consistency  the tree of checkpoint OLD is a prefix of the tree of
               checkpoint NEW: nothing OLD covered was changed or cut
               since. OLD and NEW are each a checkpoint file (its last
               note) or a number of lines, which names the checkpoint of
               that size in RECORD.checkpoints.

  anchor       one self-contained bundle for a third party: the lines,
               their proof in a signed record checkpoint, that
               checkpoint's proof as a leaf of the state directory's
               anchor log, and the anchor checkpoint with the witnesses'
               cosignatures (the one most witnesses cosigned that holds
               it). Check it with aegis verify --witness-policy FILE
               --key PUBLIC_KEY_HEX --bundle FILE [RECORD]. With --vkey
               it prints the anchor log's origin and verifier key
               instead, which a witness is configured with.

RECORD must hold, as its first lines, what each checkpoint covers; if not,
no proof is made and aegis says where it differs. Proofs hold hashes and
the one line proven, not the record.

Example:
  $ aegis prove inclusion --line 17 calls.aarl > line17.proof
  $ aegis prove consistency 1024 2048 calls.aarl > grew.proof
  $ aegis verify --key PUBLIC_KEY_HEX --proof line17.proof
  $ aegis prove anchor --line 17 calls.aarl > line17.bundle
  $ aegis verify --witness-policy witnesses --key PUBLIC_KEY_HEX --bundle line17.bundle
`

func (m *Main) runProve(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		if len(args) == 0 {
			return usagef("aegis prove inclusion --line N RECORD, aegis prove consistency OLD NEW RECORD, or aegis prove anchor --line N RECORD", "prove: missing inclusion, consistency or anchor")
		}
		fmt.Fprint(m.Stdout, proveUsage)
		return nil
	}
	sub, args := args[0], args[1:]
	var (
		p   schemas.Proof
		err error
	)
	switch sub {
	case "anchor":
		return m.proveAnchor(ctx, args)
	case "inclusion":
		fs := m.newFlagSet("prove inclusion")
		line := fs.Int64("line", 0, "the line to prove, 1-based")
		cpFile := fs.String("checkpoint", "", "the checkpoint to prove it in (its last note); default: the last in RECORD.checkpoints")
		if err := m.parseFlags(fs, proveUsage, args); err != nil {
			return err
		}
		if fs.NArg() != 1 || *line < 1 {
			return usagef("aegis prove inclusion --line N RECORD", "prove inclusion: needs --line N (1 or more) and one RECORD")
		}
		record := fs.Arg(0)
		from := record + projector.CheckpointsSuffix
		if *cpFile != "" {
			from = *cpFile
		}
		var note []byte
		if note, err = findNote(from, -1); err != nil {
			return err
		}
		p, err = projector.ProveInclusion(ctx, record, *line, note)
	case "consistency":
		fs := m.newFlagSet("prove consistency")
		if err := m.parseFlags(fs, proveUsage, args); err != nil {
			return err
		}
		if fs.NArg() != 3 {
			return usagef("aegis prove consistency OLD NEW RECORD", "prove consistency: needs OLD, NEW and RECORD")
		}
		record := fs.Arg(2)
		var notes [2][]byte
		for i, a := range fs.Args()[:2] {
			from, size := a, int64(-1)
			if n, err := strconv.ParseInt(a, 10, 64); err == nil && n > 0 {
				from, size = record+projector.CheckpointsSuffix, n
			}
			if notes[i], err = findNote(from, size); err != nil {
				return err
			}
		}
		p, err = projector.ProveConsistency(ctx, record, notes[0], notes[1])
	default:
		return usagef("aegis prove inclusion …, aegis prove consistency …, or aegis prove anchor …", "prove: unknown proof %q", sub)
	}
	if err != nil {
		if errors.Is(err, projector.ErrProve) {
			return withHint(fmt.Errorf("no proof made: %w", err), "check the record with aegis verify: it was cut or changed after that checkpoint was signed")
		}
		return fmt.Errorf("no proof made: %w", err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(m.Stdout, "%s\n", b)
	return err
}

// findNote returns the note of size lines in the file of notes at path,
// or its last note when size is -1.
func findNote(path string, size int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, withHint(fmt.Errorf("read checkpoints: %w", err),
			"aegis signs checkpoints into RECORD.checkpoints as it writes RECORD; name another file with --checkpoint")
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, schemas.MaxNote+16)
	var last []byte
	for i := 1; ; i++ {
		msg, err := schemas.ReadNote(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s note %d: %w", path, i, err)
		}
		if size < 0 {
			last = msg
			continue
		}
		text := schemas.NoteText(msg)
		if cp, err := schemas.ParseCheckpoint(text); err == nil && cp.Size == size {
			return msg, nil
		}
	}
	if size >= 0 {
		return nil, withHint(fmt.Errorf("%s holds no checkpoint of %d lines", path, size), "aegis replay lists each checkpoint signed, with the number of lines it covers")
	}
	if last == nil {
		return nil, fmt.Errorf("%s holds no checkpoint", path)
	}
	return last, nil
}
