package events

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrDamaged is wrapped (by a [*DamageError]) when messages of the event
// stream are gone.
var ErrDamaged = errors.New("event stream damaged")

// SeqRange is an inclusive range of stream sequences.
type SeqRange struct{ From, To uint64 }

func (r SeqRange) String() string {
	if r.From == r.To {
		return fmt.Sprint(r.From)
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// DamageError says which messages of the event stream are gone. The stream
// denies delete and purge, so a message missing from its sequence, or one
// the file store could not load, was lost: a torn or edited block, a
// truncated or deleted file. Nothing that reads the stream may then
// present what is left as the whole history.
type DamageError struct {
	Dir     string
	First   uint64     // the stream's first sequence
	Last    uint64     // its last
	Missing []SeqRange // the sequences that are gone
	// Detail says how the loss showed, when it showed while reading.
	Detail string
}

func (e *DamageError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the event stream in %s is damaged: ", e.Dir)
	n := uint64(0)
	for _, r := range e.Missing {
		n += r.To - r.From + 1
	}
	parts := make([]string, 0, min(len(e.Missing), 8))
	for i, r := range e.Missing {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more ranges", len(e.Missing)-8))
			break
		}
		parts = append(parts, r.String())
	}
	noun, verb := "messages", "are"
	if n == 1 {
		noun, verb = "message", "is"
	}
	fmt.Fprintf(&b, "%d %s of %d-%d %s gone (sequences %s)", n, noun, e.First, e.Last, verb, strings.Join(parts, ", "))
	if e.Detail != "" {
		b.WriteString("; " + e.Detail)
	}
	return b.String()
}

func (e *DamageError) Is(target error) bool { return target == ErrDamaged }

// Covers reports whether seq is one of the missing sequences.
func (e *DamageError) Covers(seq uint64) bool {
	for _, r := range e.Missing {
		if seq >= r.From && seq <= r.To {
			return true
		}
	}
	return false
}

// streamState is the part of the server's stream info that says what the
// stream holds and what it lost. The client library leaves out "lost", so
// Check asks the server itself.
type streamState struct {
	State struct {
		Msgs     uint64   `json:"messages"`
		Bytes    uint64   `json:"bytes"`
		FirstSeq uint64   `json:"first_seq"`
		LastSeq  uint64   `json:"last_seq"`
		Deleted  []uint64 `json:"deleted"`
		Lost     *struct {
			Msgs []uint64 `json:"msgs"`
		} `json:"lost"`
	} `json:"state"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// Check asks the server which messages of the stream are gone, and returns
// a [*DamageError] if any are, nil if none. It costs one request, whatever
// the stream holds (the server keeps the list of lost and interior deleted
// sequences in its state).
func (s *Store) Check(ctx context.Context) error {
	st, err := s.state(ctx)
	if err != nil {
		return err
	}
	return s.damage(st, "")
}

// LastSeq returns the sequence of the stream's last message (0 when it
// holds none), in one request: what a mirror of it has caught up with
// once its own last sequence is this.
func (s *Store) LastSeq(ctx context.Context) (uint64, error) {
	st, err := s.state(ctx)
	if err != nil {
		return 0, err
	}
	return st.State.LastSeq, nil
}

func (s *Store) state(ctx context.Context) (*streamState, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+StreamName, []byte(`{"deleted_details":true}`))
	if err != nil {
		return nil, fmt.Errorf("check the event stream: %w", err)
	}
	var st streamState
	if err := json.Unmarshal(msg.Data, &st); err != nil {
		return nil, fmt.Errorf("check the event stream: %w", err)
	}
	if st.Error != nil {
		return nil, fmt.Errorf("check the event stream: %s", st.Error.Description)
	}
	return &st, nil
}

// damage returns the DamageError that st shows, or nil.
func (s *Store) damage(st *streamState, detail string) error {
	var gone []uint64
	gone = append(gone, st.State.Deleted...)
	if st.State.Lost != nil {
		gone = append(gone, st.State.Lost.Msgs...)
	}
	// Sequences start at 1; an empty stream reports a 0.
	gone = slices.DeleteFunc(gone, func(q uint64) bool { return q == 0 })
	missing := ranges(gone)
	first, last := st.State.FirstSeq, st.State.LastSeq
	if s.mark > last {
		// The stream held more when it was last closed: its tail went
		// with its files (a block cut short and its index rebuilt), and
		// the store no longer knows it had it.
		missing = mergeRanges(append(missing, SeqRange{last + 1, s.mark}))
		detail = strings.TrimPrefix(detail+"; the stream ended at sequence "+strconv.FormatUint(s.mark, 10)+" when it was last closed ("+markFile+")", "; ")
	}
	if n := len(missing); n > 0 && missing[n-1].To > last {
		last = missing[n-1].To // the store forgot that it held them
	}
	// The stream starts at its base (1, or where a rotation began it) and
	// nothing may be removed from its head.
	if last > 0 && first > s.base {
		missing = mergeRanges(append([]SeqRange{{s.base, first - 1}}, missing...))
		first = s.base
	}
	if len(missing) == 0 {
		return nil
	}
	return &DamageError{Dir: s.dir, First: first, Last: last, Missing: missing, Detail: detail}
}

// mergeRanges sorts rs and joins those that overlap or touch.
func mergeRanges(rs []SeqRange) []SeqRange {
	slices.SortFunc(rs, func(a, b SeqRange) int { return cmp.Compare(a.From, b.From) })
	var out []SeqRange
	for _, r := range rs {
		if n := len(out); n > 0 && r.From <= out[n-1].To+1 {
			out[n-1].To = max(out[n-1].To, r.To)
			continue
		}
		out = append(out, r)
	}
	return out
}

// ranges sorts seqs and joins them into ranges.
func ranges(seqs []uint64) []SeqRange {
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	var out []SeqRange
	for _, q := range seqs {
		if n := len(out); n > 0 && out[n-1].To+1 == q {
			out[n-1].To = q
			continue
		}
		out = append(out, SeqRange{q, q})
	}
	return out
}

// markFile, in the state directory, holds the stream's last sequence when
// it was last closed cleanly: the one trace of the stream's length that
// is kept outside its files. A tail that is gone together with the
// store's own record of it (a block cut short, its index rebuilt) shows
// as a stream that ends before the mark. After an unclean stop the mark is
// older, and lower, which hides nothing that was marked.
const markFile = "stream-seq"

// readMark returns the mark in dir, or 0.
func readMark(dir string) uint64 {
	b, err := os.ReadFile(filepath.Join(dir, markFile))
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// saveMark writes the stream's last sequence as the mark, unless the
// stream is damaged (the mark then keeps saying how long it was). It
// replaces the file atomically.
func (s *Store) saveMark(ctx context.Context) {
	st, err := s.state(ctx)
	if err != nil || s.damage(st, "") != nil || st.State.LastSeq == 0 || st.State.LastSeq <= s.mark {
		return
	}
	if err := WriteFileAtomic(filepath.Join(s.dir, markFile), []byte(strconv.FormatUint(st.State.LastSeq, 10)+"\n")); err != nil {
		s.log.Warn("save the stream's length", "err", err)
	}
}
