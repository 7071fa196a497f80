package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
	"github.com/aegis-dev/aegis/verifier"
)

const verifyUsage = `Usage:
  aegis verify [--key HEX]… [--trust-store PATH] [--allow-gaps] [--checkpoint FILE]… RECORD…
  aegis verify --key HEX… | --trust-store PATH --proof FILE
  aegis verify --hub URL --host HOST [--hub-creds FILE] [--hub-ca FILE] [--key HEX]… RECORD…
  aegis verify --witness-policy FILE --key HEX… --bundle FILE… [RECORD…]

Checks an audit record offline (no state directory, no network) and prints:

  Verified (unpinned) | Verified (pinned to <key_id>) | Verified (pinned)
  | Tampered: <reason> | Indeterminate: <reason>
  | Not an aegis record: <file>: <why>
  key_id <hex>                 each key the record's sessions publish
  public_key <hex>             each pinned key (--key, --trust-store) that
                               signed, as you passed it (when Verified)
  checkpoint <file>: <n> lines, root <base64>, matches
                               each checkpoint that was checked
  checkpoints <file>: <count>, the last of <n> lines, root <base64>, all match
                               each file of live checkpoints checked
  coverage session <i> seq <n> the last line that passed every check
  in_flight <call_id>          calls cut off by an unfinished session

--key takes a 64-hex Ed25519 public key (as 'aegis keygen' prints it), not a
key_id; --trust-store names a file of such keys, one per line (# comments
allowed). Either one pins: every session must publish a trusted key.
Without them the walk is unpinned and only proves internal consistency.

A rotated record is several files: sealed segments (audit.000001.jsonl,
audit.000002.jsonl, …) and the live file (audit.jsonl). Name them all,
oldest segment first and the live file last; they are verified as one
record, whose chain must run on from each file into the next. A sealed
segment's signed checkpoint, <RECORD>.checkpoint, is picked up when it
exists, and the file must hold exactly the lines it seals: fewer lines,
more lines, another line or a checkpoint that no key of the record signed
is Tampered. A later segment verified without the ones before it is
Tampered, because nothing shows what its first session links to.

While aegis writes a record it signs checkpoints of its first lines (every
1024 lines, every 10 s, and at close) into <RECORD>.checkpoints; each is
checked when that file exists: a record holding fewer lines than one
covers (cut from its end), or other lines, is Tampered. Of a record still
being written, the checkpoints in that file when verify starts are
checked; those signed while it reads are left for the next run.

--checkpoint names a checkpoint file explicitly (once per record file); it
applies to the record file its origin names, or to the only RECORD. For
the live file (the last RECORD) it may hold several notes, and each must
cover the file's first lines: keep a copy of the last one elsewhere, and a
record cut together with its sidecar is still caught.

A line of a type this verifier does not know (written by a newer version)
makes the record Indeterminate, signed or not: a signature says who wrote
the line, not what it means. A bad signature on it is Tampered.

A gap line ("line_type":"gap"), which 'aegis export --salvage' writes where
a damaged state directory lost audit lines, is Tampered: lines were dropped
there, and whoever drops lines can write one. --allow-gaps says the record
is a salvage: gap lines then make it Indeterminate (record_gap), and every
line around them is still checked.

--hub (the hub's client URLs) with --host checks the live file against
the last checkpoint of it that the host's mirror on a fleet's hub holds,
in place of RECORD.checkpoints: a record cut on the machine after that
checkpoint reached the hub is Tampered, even with its sidecar cut too (an
'aegis export' of a cut stream as well).

--proof FILE checks a proof that 'aegis prove' printed, without the
record: its checkpoints must be signed by a pinned key, and the RFC 6962
inclusion or consistency proof must hold. It prints Verified and what was
proven, or Tampered and why.

--witness-policy FILE with --bundle FILE checks a bundle that 'aegis
prove anchor' printed, offline and without the state directory: each
line is in its signed record checkpoint, that checkpoint is a leaf of the
state directory's anchor log, and that log's checkpoint is signed by the
pinned key and cosigned by a quorum of the policy's witnesses (lines
"witness NAME VKEY [URL]", "group NAME any|all|K MEMBER…", "quorum NAME",
the Sigsum policy format). A proof that fails is Tampered; a quorum that
is not met is Indeterminate (not_witnessed). Two bundles whose anchor
checkpoints have one size and different roots are Tampered (anchor_fork):
a split view. With RECORD, the live file (the last) must also hold what
each bundle's record checkpoint covers (in place of RECORD.checkpoints and
--hub), so a record cut after a witnessed checkpoint is Tampered whatever
its sidecar and the hub now hold.

A file that is no audit record at all (none of its first 1000 lines is an
audit line: a text, YAML or another program's JSON) prints "Not an aegis
record: FILE: why" and exits 4. A record whose first line was damaged
still has audit lines after it, and is Tampered.

Exit codes (one table for every command: aegis help errors):
  0  Verified
  1  Tampered
  2  a usage error (a bad --key, a malformed trust store line, no RECORD),
     or a record, checkpoint, proof or trust store could not be read
  3  Indeterminate
  4  not an aegis record
The record format's own verifier exits 1 on a usage error; aegis exits 2,
as every command does, so that 1 always means Tampered.

Examples:
  $ aegis verify --key 3de537a0…4e2c calls.aarl
  $ aegis verify --key 3de537a0…4e2c audit.000001.jsonl audit.000002.jsonl audit.jsonl
`

type keysFlag []ed25519.PublicKey

func (f *keysFlag) String() string { return fmt.Sprint(len(*f)) }
func (f *keysFlag) Set(v string) error {
	k, err := schemas.ParsePublicKey(v)
	if err != nil {
		return err // the flag package names the flag and the value
	}
	*f = append(*f, k)
	return nil
}

// maxCheckpointFile bounds how much of a checkpoint file is read; a real
// one is a few hundred bytes, and a longer one fails to parse.
const maxCheckpointFile = 64 << 10

// verify exits 2 on a usage error, as every command does (the record
// format's verifier exits 1): 1 from verify always means Tampered.
func (m *Main) runVerify(ctx context.Context, args []string) error {
	fs := m.newFlagSet("verify")
	var keys keysFlag
	fs.Var(&keys, "key", "trusted public key (repeatable)")
	trust := fs.String("trust-store", "", "file of trusted public keys")
	allowGaps := fs.Bool("allow-gaps", false, "the record is a salvage: read gap lines as lost lines, not dropped ones")
	var checkpoints multiFlag
	fs.Var(&checkpoints, "checkpoint", "signed checkpoint of one RECORD (repeatable, once per RECORD)")
	proof := fs.String("proof", "", "check a proof that aegis prove printed, instead of a record")
	witnessPolicy := fs.String("witness-policy", "", "check --bundle against this witness policy (Sigsum format)")
	var bundles multiFlag
	fs.Var(&bundles, "bundle", "an anchor bundle that aegis prove anchor printed (repeatable)")
	hub := addReaderFlags(fs)
	if err := m.parseFlags(fs, verifyUsage, args); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return &exitError{code: exitUsage, err: errors.New(ue.msg), hint: "--key takes the public_key that 'aegis keygen' printed, not the key_id"}
		}
		return err
	}
	if err := hub.noneWithout(); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if len(bundles) > 0 || *witnessPolicy != "" {
		if len(bundles) == 0 || *witnessPolicy == "" || *proof != "" {
			return &exitError{code: exitUsage, err: errors.New("verify --witness-policy checks --bundle files: give both, and no --proof"), hint: "aegis verify --witness-policy FILE --key PUBLIC_KEY_HEX --bundle FILE [RECORD]"}
		}
	} else if *proof != "" {
		if fs.NArg() > 0 || len(checkpoints) > 0 || *allowGaps || hub.set() {
			return &exitError{code: exitUsage, err: errors.New("verify --proof checks the proof alone: no RECORD, --checkpoint or --allow-gaps"), hint: "aegis verify --key PUBLIC_KEY_HEX --proof FILE"}
		}
	} else if fs.NArg() == 0 && len(bundles) == 0 {
		return &exitError{code: exitUsage, err: errors.New("verify takes one RECORD path, or the files of a rotated record oldest first; got none"), hint: verifySynopsis}
	}
	opts := verifier.Options{Keys: keys, AllowGaps: *allowGaps}
	if *trust != "" {
		f, err := os.Open(*trust)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("read trust store: %w", err)}
		}
		ts, err := verifier.ParseTrustStore(f)
		f.Close()
		if err != nil {
			var te *verifier.TrustStoreError
			if errors.As(err, &te) {
				return &exitError{code: exitUsage, err: fmt.Errorf("trust store %s: %w", *trust, err), hint: "one 64-hex public key per line; blank lines and whole-line # comments are allowed"}
			}
			return &exitError{code: 2, err: fmt.Errorf("read trust store: %w", err)}
		}
		opts.TrustStore = ts
	}
	if *proof != "" {
		return m.verifyProof(*proof, opts)
	}
	var bundleNotes [][]byte
	if len(bundles) > 0 {
		var done bool
		var err error
		if bundleNotes, done, err = m.verifyBundles(*witnessPolicy, bundles, opts, fs.NArg() == 0); done || err != nil {
			return err
		}
	}
	paths := fs.Args()
	segs := make([]verifier.Segment, len(paths))
	for i, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("read record: %w", err)}
		}
		defer f.Close()
		segs[i] = verifier.Segment{Name: p, Record: f}
		if fi, err := os.Stat(p + projector.CheckpointsSuffix); err == nil {
			// A record being written gets checkpoints appended while it
			// is read: those there now cover lines already in the file;
			// later ones are left for the next verify, since the sidecar
			// must read the same twice (beside the walk and for the
			// signatures).
			segs[i].Checkpoints, segs[i].CheckpointsName = openerUpTo(p+projector.CheckpointsSuffix, fi.Size()), p+projector.CheckpointsSuffix
		} else if !errors.Is(err, os.ErrNotExist) {
			return &exitError{code: 2, err: fmt.Errorf("read checkpoints: %w", err)}
		}
		cp := p + ".checkpoint"
		b, err := readCheckpoint(cp)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return &exitError{code: 2, err: fmt.Errorf("read checkpoint: %w", err)}
		default:
			segs[i].Checkpoint, segs[i].CheckpointName = b, cp
		}
	}
	if err := assignCheckpoints(segs, checkpoints); err != nil {
		return err
	}
	if hub.set() {
		if err := m.hubCheckpoint(ctx, hub, &segs[len(segs)-1]); err != nil {
			return err
		}
	}
	if len(bundleNotes) > 0 {
		// The witnessed record checkpoints: the live file must hold what
		// each covers, whatever its sidecar and the hub now say.
		var all []byte
		for _, n := range bundleNotes {
			all = append(append(all, n...), '\n')
		}
		last := &segs[len(segs)-1]
		last.Checkpoints = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(all)), nil }
		last.CheckpointsName = "the bundle's witnessed checkpoint"
	}
	var res verifier.Result
	if len(segs) == 1 && segs[0].Checkpoint == nil && segs[0].Checkpoints == nil {
		res = verifier.Verify(segs[0].Record, opts)
	} else {
		res = verifier.VerifySet(segs, opts)
	}
	if res.Err != nil {
		return &exitError{code: 2, err: fmt.Errorf("read record: %w", res.Err)}
	}
	if file, why, ok := notARecord(res, paths); ok {
		fmt.Fprintf(m.Stdout, "Not an aegis record: %s: %s\n", file, why)
		return &exitError{code: exitNotARecord, hint: "name an audit record that aegis wrap or aegis gateway wrote (--audit), or one that aegis export rebuilt"}
	}
	out := verifier.Render(res)
	if res.Verdict == verifier.Verified && res.Pinned {
		out = afterLines(out, 1+len(res.KeyIDs), pinnedKeys(res, opts))
	}
	fmt.Fprint(m.Stdout, out)
	if res.Verdict == verifier.Verified && !res.Pinned {
		m.warnf("unpinned: the record is consistent, but it proves nothing about who wrote it; anyone with any key could have")
		m.hintf("pin the key you trust: aegis verify --key PUBLIC_KEY_HEX %s (or --trust-store PATH)", strings.Join(paths, " "))
	}
	code := verifier.ExitCode(res)
	if code == 0 {
		return nil
	}
	ee := &exitError{code: code}
	if res.Continued {
		live := liveRecordName(paths[len(paths)-1])
		ee.hint = fmt.Sprintf("%s continues a rotated record; name the earlier segments before it, oldest first (aegis verify %s … %s)",
			paths[0], projector.SegmentName(live, 1), live)
	}
	return ee
}

// pinnedKeys repeats, one "public_key HEX" line each, the keys the user
// pinned (--key, --trust-store) that signed the record's sessions, in the
// order the record names them: the key the user passed, beside its key_id
// that the record names.
func pinnedKeys(res verifier.Result, opts verifier.Options) string {
	pinned := map[string]ed25519.PublicKey{}
	add := func(ks []ed25519.PublicKey) {
		for _, k := range ks {
			pinned[schemas.KeyID(k)] = k
		}
	}
	add(opts.Keys)
	if opts.TrustStore != nil {
		add(opts.TrustStore.Keys)
	}
	var b strings.Builder
	for _, id := range res.KeyIDs {
		if k, ok := pinned[id]; ok {
			b.WriteString("public_key " + schemas.PublicKeyHex(k) + "\n")
		}
	}
	return b.String()
}

// afterLines returns s with add inserted after its first n lines.
func afterLines(s string, n int, add string) string {
	at := 0
	for ; n > 0; n-- {
		i := strings.IndexByte(s[at:], '\n')
		if i < 0 {
			return s + add
		}
		at += i + 1
	}
	return s[:at] + add + s[at:]
}

const verifySynopsis = "aegis verify [--key HEX]… [--trust-store PATH] [--allow-gaps] [--checkpoint FILE]… RECORD…   or: aegis verify --key HEX --proof FILE   or: aegis verify --witness-policy FILE --key HEX --bundle FILE [RECORD…]"

// readCheckpoint reads a checkpoint file, at most maxCheckpointFile bytes
// and one more (which the verifier then refuses).
func readCheckpoint(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxCheckpointFile+1))
}

// assignCheckpoints gives each --checkpoint file to the record file it
// seals: the only one, or the one whose base name its origin ends in. An
// explicit checkpoint replaces one found next to the file.
func assignCheckpoints(segs []verifier.Segment, paths []string) error {
	given := map[int]string{}
	for _, p := range paths {
		b, err := readCheckpoint(p)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("read checkpoint: %w", err)}
		}
		i := 0
		if len(segs) > 1 {
			if i = checkpointTarget(segs, b); i < 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("checkpoint %s: cannot tell which RECORD it seals", p),
					hint: "its origin line (aegis/<key_id>/<file name>) must end in the base name of one RECORD; name the checkpoint of a renamed file with that file alone"}
			}
		}
		if prev, dup := given[i]; dup {
			return &exitError{code: exitUsage, err: fmt.Errorf("checkpoints %s and %s both seal %s", prev, p, segs[i].Name), hint: "give --checkpoint once per RECORD"}
		}
		given[i] = p
		if i == len(segs)-1 {
			// The live file may have grown since: its checkpoints cover
			// its first lines.
			segs[i].Checkpoints, segs[i].CheckpointsName = opener(p), p
			continue
		}
		segs[i].Checkpoint, segs[i].CheckpointName = b, p
	}
	return nil
}

// opener returns a function that opens path.
func opener(path string) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return os.Open(path) }
}

// checkpointTarget returns the index of the record file whose base name
// ends the checkpoint's origin, or -1 when not exactly one does. The note
// is not verified here; the verifier checks it against that file.
func checkpointTarget(segs []verifier.Segment, msg []byte) int {
	split := strings.Index(string(msg), "\n\n")
	if split < 0 {
		return -1
	}
	cp, err := schemas.ParseCheckpoint(msg[:split+1])
	if err != nil {
		return -1
	}
	_, base, ok := strings.Cut(strings.TrimPrefix(cp.Origin, "aegis/"), "/")
	if !ok {
		return -1
	}
	found := -1
	for i, s := range segs {
		if filepath.Base(s.Name) == base {
			if found >= 0 {
				return -1
			}
			found = i
		}
	}
	return found
}

// liveRecordName returns the live record file that a segment was rotated
// from (audit.000002.jsonl: audit.jsonl), or path itself when its name
// holds no 6-digit counter.
func liveRecordName(path string) string {
	dir, base := filepath.Split(path)
	stem, ext := splitExt(base)
	if i := strings.LastIndexByte(stem, '.'); i > 0 && len(stem)-i-1 == 6 && strings.Trim(stem[i+1:], "0123456789") == "" {
		return dir + stem[:i] + ext
	}
	if i := strings.LastIndexByte(base, '.'); i > 0 && len(base)-i-1 == 6 && strings.Trim(base[i+1:], "0123456789") == "" {
		return dir + base[:i] // audit.000001 from audit
	}
	return path
}

// splitExt splits a base name before its last dot (not a leading one).
func splitExt(base string) (stem, ext string) {
	if i := strings.LastIndexByte(base, '.'); i > 0 {
		return base[:i], base[i:]
	}
	return base, ""
}

// verifyBundles checks anchor bundles against a witness policy and the
// pinned keys, and that no two of them show a forked anchor log. It
// returns their record checkpoints, for the RECORD to hold; done when
// there is no RECORD and the verdict was printed.
func (m *Main) verifyBundles(policyPath string, paths []string, opts verifier.Options, alone bool) ([][]byte, bool, error) {
	keys := opts.Keys
	if opts.TrustStore != nil {
		keys = append(keys[:len(keys):len(keys)], opts.TrustStore.Keys...)
	}
	if len(keys) == 0 {
		return nil, true, &exitError{code: exitUsage, err: errors.New("verify --bundle needs the key that signed the checkpoints: a bundle checked against no key proves nothing"),
			hint: "aegis verify --witness-policy FILE --key PUBLIC_KEY_HEX --bundle FILE (the bundle's public_key, if you trust it)"}
	}
	pb, err := os.ReadFile(policyPath)
	if err != nil {
		return nil, true, &exitError{code: 2, err: fmt.Errorf("read witness policy: %w", err)}
	}
	policy, err := schemas.ParseWitnessPolicy(pb)
	if err != nil {
		return nil, true, &exitError{code: exitUsage, err: fmt.Errorf("%s: %w", policyPath, err), hint: "a line is: witness NAME VKEY [URL], group NAME any|all|K MEMBER…, or quorum NAME"}
	}
	var (
		anchors []schemas.AnchorCheckpoint
		notes   [][]byte
		results []verifier.BundleResult
		said    []string
	)
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, true, &exitError{code: 2, err: fmt.Errorf("read bundle: %w", err)}
		}
		b, err := schemas.ParseBundle(f)
		f.Close()
		if err != nil {
			if errors.Is(err, schemas.ErrProof) {
				return nil, true, &exitError{code: 1, err: fmt.Errorf("bundle %s: %w", p, err), hint: "a bundle is the JSON object that 'aegis prove anchor' prints"}
			}
			return nil, true, &exitError{code: 2, err: fmt.Errorf("read bundle: %w", err)}
		}
		res, reason := verifier.CheckBundle(b, policy, keys)
		if res.Anchor.Origin != "" {
			anchors = append(anchors, res.Anchor)
		}
		if fork := verifier.CheckForks(anchors); fork != nil {
			reason = fork
		}
		if reason != nil {
			if reason.Code == verifier.NotWitnessed {
				fmt.Fprintf(m.Stdout, "Indeterminate: %s: %s\n", p, reason.Message)
				return nil, true, &exitError{code: 3}
			}
			fmt.Fprintf(m.Stdout, "Tampered: %s: %s\n", p, reason.Message)
			return nil, true, &exitError{code: 1}
		}
		notes = append(notes, []byte(b.RecordCheckpoint))
		results = append(results, res)
		said = append(said, fmt.Sprintf("%s: %d line(s) in the checkpoint of %d lines of %s, leaf %d of the anchor log %s of %d leaves, cosigned by %s",
			p, len(b.Lines), res.Record.Size, res.Record.Origin, b.AnchorIndex, res.Anchor.Origin, res.Anchor.Size, strings.Join(res.Witnesses, ", ")))
	}
	if !alone {
		return notes, false, nil
	}
	fmt.Fprintf(m.Stdout, "Verified (pinned to %s)\n", results[0].Signer)
	fmt.Fprintln(m.Stdout, strings.Join(said, "\n"))
	return nil, true, nil
}

// verifyProof checks a proof document against the pinned keys.
func (m *Main) verifyProof(path string, opts verifier.Options) error {
	keys := opts.Keys
	if opts.TrustStore != nil {
		keys = append(keys[:len(keys):len(keys)], opts.TrustStore.Keys...)
	}
	if len(keys) == 0 {
		return &exitError{code: exitUsage, err: errors.New("verify --proof needs the key that signed the checkpoints: a proof checked against no key proves nothing"),
			hint: "aegis verify --key PUBLIC_KEY_HEX --proof " + path + " (or --trust-store PATH)"}
	}
	f, err := os.Open(path)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("read proof: %w", err)}
	}
	p, err := schemas.ParseProof(f)
	f.Close()
	if err != nil {
		if errors.Is(err, schemas.ErrProof) {
			return &exitError{code: 1, err: fmt.Errorf("proof %s: %w", path, err), hint: "a proof is the JSON object that 'aegis prove' prints"}
		}
		return &exitError{code: 2, err: fmt.Errorf("read proof: %w", err)}
	}
	res, reason := verifier.CheckProof(p, keys)
	if reason != nil {
		fmt.Fprintf(m.Stdout, "Tampered: %s\n", reason.Message)
		return &exitError{code: 1}
	}
	cp := res.Checkpoint
	fmt.Fprintf(m.Stdout, "Verified (pinned to %s)\n", res.Signer)
	switch p.Kind {
	case schemas.ProofInclusion:
		fmt.Fprintf(m.Stdout, "line %d (leaf hash %s) is in the tree of %d lines, root %s, of %s\n", p.LineNumber, p.LeafHash, cp.Size, p.Root, cp.Origin)
	case schemas.ProofConsistency:
		fmt.Fprintf(m.Stdout, "the tree of %d lines, root %s, is a prefix of the tree of %d lines, root %s, of %s\n", res.Old.Size, p.OldRoot, cp.Size, p.Root, cp.Origin)
	}
	return nil
}

// hubCheckpoint sets the live record file's checkpoints to the last one
// of it that the hub's mirror of the host holds: the record must hold
// what that one covers, whatever was done to the machine's copies.
func (m *Main) hubCheckpoint(ctx context.Context, hub *hubFlags, seg *verifier.Segment) error {
	mirror, err := hub.open(ctx, "verify")
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer mirror.Close()
	base := filepath.Base(seg.Name)
	rec, ok, err := mirror.LastCheckpoint(ctx, func(e schemas.Event) bool {
		var c projector.RecordCheckpoint
		return json.Unmarshal(e.Payload, &c) == nil && filepath.Base(c.AuditPath) == base
	})
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("read the hub: %w", err)}
	}
	if !ok {
		return &exitError{code: 2, err: fmt.Errorf("the hub's mirror of %s holds no checkpoint of a record named %s", *hub.host, base),
			hint: "checkpoints reach the hub once the host's aegis signed one (every 1024 lines, 10 s, at close) and the mirror pulled it"}
	}
	var c projector.RecordCheckpoint
	if err := json.Unmarshal(rec.Event.Payload, &c); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("the hub's checkpoint at %d: %w", rec.Pos.Seq, err)}
	}
	note := []byte(c.Note + "\n")
	seg.Checkpoints = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(note)), nil }
	seg.CheckpointsName = "hub:" + events.MirrorName(*hub.host)
	return nil
}

// exitNotARecord is verify's exit code for a file that is no audit record
// at all, beside the record format's 0 Verified, 1 Tampered, 2 unreadable
// and 3 Indeterminate.
const exitNotARecord = 4

// notARecordScan bounds how much of a file notARecord reads.
const (
	notARecordLines = 1000
	notARecordBytes = 4 << 20
)

// notARecord says whether a verify that failed on the first line of a
// file, with no line of the record checked, failed on a file that is no
// audit record at all: none of its first lines (notARecordLines, up to
// notARecordBytes) reads as an audit line. A record whose first line was
// damaged still has audit lines after it, and stays Tampered or
// Indeterminate; only a file without any is called no record.
func notARecord(res verifier.Result, paths []string) (file, why string, ok bool) {
	r := res.Reason
	if res.Verdict == verifier.Verified || r == nil || res.Coverage != nil || r.Line != 1 ||
		r.Code != verifier.MalformedLine && r.Code != verifier.TornFinalLine {
		return "", "", false
	}
	file = r.File
	if file == "" {
		if len(paths) != 1 {
			return "", "", false
		}
		file = paths[0]
	}
	f, err := os.Open(file)
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, notARecordBytes))
	sc.Buffer(make([]byte, 0, 64<<10), notARecordBytes)
	first := ""
	for n := 0; n < notARecordLines && sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		l, err := schemas.DecodeLine(line)
		if err == nil {
			if _, err = l.Header(); err == nil {
				return "", "", false
			}
		}
		if first == "" {
			first = err.Error()
		}
	}
	if first == "" {
		return "", "", false // nothing but empty lines: the verdict says so
	}
	return file, "no line of it is an audit line (the first: " + first + ")", true
}
