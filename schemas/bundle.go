package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// An anchor bundle is what aegis prove anchor prints and aegis verify
// --witness-policy --bundle checks, offline and without the state
// directory: record lines, each with its RFC 6962 inclusion proof in a
// signed record checkpoint; that checkpoint's text as a leaf of the
// anchor log, with its inclusion proof in a checkpoint of the anchor log;
// and that anchor checkpoint signed by the log and cosigned by witnesses
// (C2SP tlog-cosignature lines after the log's signature).
//
//	{"bundle":"aegis-anchor-bundle/v1","public_key":HEX,
//	 "record_checkpoint":NOTE,"lines":[{"line_number":L,"line":TEXT,"path":[H…]}…],
//	 "anchor_index":I,"anchor_path":[H…],"anchor_checkpoint":NOTE}

// BundleV1 names the bundle format.
const BundleV1 = "aegis-anchor-bundle/v1"

// AnchorBundle is an anchor bundle (see above).
type AnchorBundle struct {
	Bundle string `json:"bundle"`
	// PublicKey is the host's key (64 hex) that signed the record and
	// anchor checkpoints; a verifier trusts it only if pinned.
	PublicKey        string       `json:"public_key"`
	RecordCheckpoint string       `json:"record_checkpoint"`
	Lines            []BundleLine `json:"lines"`
	AnchorIndex      int64        `json:"anchor_index"`
	AnchorPath       []string     `json:"anchor_path"`
	AnchorCheckpoint string       `json:"anchor_checkpoint"`
}

// BundleLine is one record line of a bundle and its audit path in the
// record checkpoint's tree.
type BundleLine struct {
	LineNumber int64    `json:"line_number"`
	Line       string   `json:"line"`
	Path       []string `json:"path"`
}

// ParseBundle parses an anchor bundle strictly.
func ParseBundle(r io.Reader) (AnchorBundle, error) {
	fail := func(format string, args ...any) (AnchorBundle, error) {
		return AnchorBundle{}, fmt.Errorf("%w: bundle: "+format, append([]any{ErrProof}, args...)...)
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxProofDocument+1))
	if err != nil {
		return AnchorBundle{}, err
	}
	if len(b) > MaxProofDocument {
		return fail("longer than %d bytes", MaxProofDocument)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var a AnchorBundle
	if err := dec.Decode(&a); err != nil {
		return fail("%v", err)
	}
	if dec.More() {
		return fail("more than one JSON value")
	}
	if a.Bundle != BundleV1 {
		return fail("unknown bundle %q", a.Bundle)
	}
	if a.RecordCheckpoint == "" || a.AnchorCheckpoint == "" || a.AnchorIndex < 0 {
		return fail("no record checkpoint, anchor checkpoint or anchor index")
	}
	paths := [][]string{a.AnchorPath}
	for _, l := range a.Lines {
		if l.LineNumber < 1 {
			return fail("line number %d", l.LineNumber)
		}
		paths = append(paths, l.Path)
	}
	for _, p := range paths {
		if len(p) > 64 {
			return fail("a path of %d hashes", len(p))
		}
		for _, h := range p {
			if _, err := DecodeProofHash(h); err != nil {
				return fail("%v", err)
			}
		}
	}
	return a, nil
}
