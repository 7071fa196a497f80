package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// proveAnchor prints the anchor bundle of lines of record: the newest
// record checkpoint of RECORD.checkpoints that covers them and whose
// anchor leaf is in a checkpoint of the anchor log that witnesses
// cosigned (the most witnesses, then the largest), or, when none was
// cosigned yet, the newest one in the log's last checkpoint.
func (m *Main) proveAnchor(ctx context.Context, args []string) error {
	fs := m.newFlagSet("prove anchor")
	var lines multiFlag
	fs.Var(&lines, "line", "a line to prove, 1-based (repeatable)")
	stateDir := fs.String("state-dir", "", "the state directory that recorded RECORD")
	vkey := fs.Bool("vkey", false, "print the anchor log's origin and verifier key (for a witness) instead")
	if err := m.parseFlags(fs, proveUsage, args); err != nil {
		return err
	}
	if *vkey {
		if fs.NArg() != 1 || len(lines) > 0 {
			return usagef("aegis prove anchor --vkey RECORD", "prove anchor --vkey: needs one RECORD and no --line")
		}
		pub, err := recordPublicKey(fs.Arg(0))
		if err != nil {
			return err
		}
		origin, vk, err := projector.AnchorVerifierKey(pub)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(m.Stdout, "origin %s\nvkey %s\n", origin, vk)
		return err
	}
	if fs.NArg() != 1 || len(lines) == 0 {
		return usagef("aegis prove anchor --line N [--line M]… RECORD", "prove anchor: needs --line N and one RECORD")
	}
	record := fs.Arg(0)
	var want []int64
	for _, l := range lines {
		var n int64
		if _, err := fmt.Sscanf(l, "%d", &n); err != nil || n < 1 {
			return usagef("aegis prove anchor --line 17 RECORD", "prove anchor: --line %q is not a line number", l)
		}
		want = append(want, n)
	}
	pub, err := recordPublicKey(record)
	if err != nil {
		return err
	}
	st, err := m.openStoreToRead(ctx, *stateDir)
	if err != nil {
		return err
	}
	defer st.Close(context.Background())
	origin := schemas.AnchorOrigin(schemas.KeyID(pub))
	tree, err := projector.ReadAnchor(ctx, st, pub)
	if err != nil {
		return fmt.Errorf("no bundle made: %w", err)
	}
	defer tree.Close()
	if err := tree.Snapshot(); err != nil {
		// A state directory recorded before the snapshot was kept has
		// none; one that does not match the stream is a cache gone
		// stale. Either way the bundle is the same, only slower to make.
		why := err.Error()
		if errors.Is(err, events.ErrNoIndex) {
			why = "there is none"
		}
		fmt.Fprintf(m.Stderr, "aegis: the anchor log's snapshot in the index folder was not used (%s): folded the whole event stream (%d events); the next aegis wrap or gateway on this state directory saves it anew\n", why, tree.Folded())
	} else if err := tree.CosignedSnapshot(); err != nil {
		// The same: the cosignatures kept with it are read from every
		// anchor.cosigned event of the stream instead.
		fmt.Fprintf(m.Stderr, "aegis: the witnesses' cosignatures kept with the anchor log's snapshot in the index folder were not used (%s): read every cosignature of the event stream (%d events); the next aegis wrap or gateway on this state directory saves them anew\n", err, tree.CosignedFolded())
	}
	notes, err := allNotes(record + projector.CheckpointsSuffix)
	if err != nil {
		return err
	}
	maxLine := want[0]
	for _, n := range want {
		maxLine = max(maxLine, n)
	}
	// The anchor checkpoints to choose from: cosigned ones, best first,
	// then the log's last.
	type anchorCP struct {
		size int64
		note string
	}
	var cands []anchorCP
	for size, by := range tree.Cosigned {
		cands = append(cands, anchorCP{size, mergeCosigned(by)})
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := tree.Cosigned[cands[i].size], tree.Cosigned[cands[j].size]
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return cands[i].size > cands[j].size
	})
	if tree.Note() != nil {
		cands = append(cands, anchorCP{tree.Size(), string(tree.Note())})
	}
	// The leaves of the checkpoints that cover the lines, found from the
	// log's newest leaf back: down to the newest in the best anchor
	// checkpoint (the one chosen, as a record's checkpoints join the log
	// in order), or, when it holds none, all of them.
	texts := make([][]byte, len(notes))
	var covering [][]byte
	for i, n := range notes {
		texts[i] = schemas.NoteText(n)
		if cp, err := schemas.ParseCheckpoint(texts[i]); err == nil && cp.Size >= maxLine {
			covering = append(covering, texts[i])
		}
	}
	below := int64(-1)
	if len(cands) > 0 {
		below = cands[0].size
	}
	leaves, err := tree.LeafIndexesDownTo(covering, below)
	if err != nil {
		return fmt.Errorf("no bundle made: %w", err)
	}
	for _, ac := range cands {
		for i := len(notes) - 1; i >= 0; i-- {
			cp, err := schemas.ParseCheckpoint(schemas.NoteText(notes[i]))
			if err != nil || cp.Size < maxLine {
				continue
			}
			idx, ok := leaves[tlog.RecordHash(texts[i])]
			if !ok || idx >= ac.size {
				continue
			}
			path, err := tree.ProveLeaf(idx, ac.size)
			if err != nil {
				return err
			}
			b := schemas.AnchorBundle{Bundle: schemas.BundleV1, PublicKey: schemas.PublicKeyHex(pub),
				RecordCheckpoint: string(notes[i]), AnchorIndex: idx, AnchorCheckpoint: ac.note}
			for _, h := range path {
				b.AnchorPath = append(b.AnchorPath, schemas.ProofHash(h))
			}
			for _, n := range want {
				p, err := projector.ProveInclusion(ctx, record, n, notes[i])
				if err != nil {
					if errors.Is(err, projector.ErrProve) {
						return withHint(fmt.Errorf("no bundle made: %w", err), "check the record with aegis verify: it was cut or changed after that checkpoint was signed")
					}
					return fmt.Errorf("no bundle made: %w", err)
				}
				b.Lines = append(b.Lines, schemas.BundleLine{LineNumber: n, Line: p.Line, Path: p.Path})
			}
			out, err := json.Marshal(b)
			if err != nil {
				return err
			}
			if len(tree.Cosigned[ac.size]) == 0 {
				m.noCosignature(st.Dir(), tree, idx)
			}
			_, err = fmt.Fprintf(m.Stdout, "%s\n", out)
			return err
		}
	}
	return withHint(fmt.Errorf("no bundle made: no checkpoint of %s covering line %d is in the anchor log of %s", record, maxLine, origin),
		"a record's lines join the anchor log with its next checkpoint (every --checkpoint-lines lines, --checkpoint-interval, at close); name the state directory that recorded it with --state-dir (the live one also for a record sealed by aegis rotate: the log goes on across rotations, while an archive holds it only up to its rotation)")
}

// noCosignature says on stderr that the bundle about to be printed, of
// leaf idx, carries no witness's cosignature, when witnesses cosign this
// log (the stream holds cosignatures) or a rotation archived the stream
// that may hold them; a log no witness was ever asked about gets no word.
func (m *Main) noCosignature(dir string, tree *projector.AnchorTree, idx int64) {
	archives, _ := filepath.Glob(filepath.Join(dir, events.ArchiveDir, "stream-*"))
	if len(tree.Cosigned) == 0 && len(archives) == 0 {
		return
	}
	msg := fmt.Sprintf("aegis: no witness cosignature in this state directory's stream covers leaf %d of the anchor log: the bundle carries only the log's own checkpoint (%d leaves), short of any quorum of aegis verify --witness-policy; ask again once a witness has cosigned a newer one", idx, tree.Size())
	if len(archives) > 0 {
		msg += fmt.Sprintf(". Cosignatures made before a rotation stay in its archive: for a line of a record that rotation sealed, run aegis prove anchor --state-dir %s (the archive of that rotation)", filepath.Join(dir, events.ArchiveDir, "stream-…"))
	}
	fmt.Fprintln(m.Stderr, msg)
}

// mergeCosigned returns the anchor checkpoint with every witness's
// cosignature lines after the log's signature.
func mergeCosigned(by map[string]string) string {
	names := make([]string, 0, len(by))
	for w := range by {
		names = append(names, w)
	}
	sort.Strings(names)
	var out string
	for _, w := range names {
		n := by[w]
		if out == "" {
			out = n
			continue
		}
		for _, l := range strings.SplitAfter(n, "\n") {
			if strings.HasPrefix(l, "— "+w+" ") {
				out += l
			}
		}
	}
	return out
}

// allNotes returns every note of a file of notes.
func allNotes(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, withHint(fmt.Errorf("read checkpoints: %w", err), "aegis signs checkpoints into RECORD.checkpoints as it writes RECORD")
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, schemas.MaxNote+16)
	var out [][]byte
	for {
		msg, err := schemas.ReadNote(br)
		if errors.Is(err, io.EOF) || errors.Is(err, schemas.ErrTornNote) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, msg)
	}
}

// recordPublicKey returns the public key the record's first line (an
// open line) publishes.
func recordPublicKey(record string) ([]byte, error) {
	f, err := os.Open(record)
	if err != nil {
		return nil, fmt.Errorf("read record: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 1<<20).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("read record: %w", err)
	}
	var open map[string]any
	if json.Unmarshal(line, &open) != nil {
		return nil, fmt.Errorf("%s: its first line is not an audit line", record)
	}
	s, _ := open[schemas.FieldPublicKey].(string)
	pub, err := schemas.ParsePublicKey(s)
	if err != nil {
		return nil, fmt.Errorf("%s: its first line publishes no public key: %w", record, err)
	}
	return pub, nil
}
