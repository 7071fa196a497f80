package projector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/schemas"
)

// SalvageGap is one range of stream messages that a damaged state
// directory lost, and what of the record went with it.
type SalvageGap struct {
	Lost events.SeqRange
	// Before and After are where the record stood on either side: the
	// session and the seq of its last line before the gap, of its first
	// line after it (Session empty: no line on that side).
	Before, After LinePlace
}

// LinePlace is a line of the record: its session and seq.
type LinePlace struct {
	Session string
	Seq     uint64
}

// String says what the gap took from the record, as far as the lines
// around it tell.
func (g SalvageGap) String() string {
	b, a := g.Before, g.After
	var what string
	switch {
	case b.Session == "" && a.Session == "":
		what = "no audit line survives around it"
	case b.Session != "" && b.Session == a.Session && a.Seq == b.Seq+1:
		what = fmt.Sprintf("session %s runs on from line %d to %d: no audit line of it was lost", b.Session, b.Seq, a.Seq)
	case b.Session != "" && b.Session == a.Session && a.Seq == b.Seq+2:
		what = fmt.Sprintf("session %s lost audit line %d", b.Session, b.Seq+1)
	case b.Session != "" && b.Session == a.Session:
		what = fmt.Sprintf("session %s lost audit lines %d to %d", b.Session, b.Seq+1, a.Seq-1)
	case b.Session == "":
		what = fmt.Sprintf("the record before session %s line %d is gone", a.Session, a.Seq)
	case a.Session == "":
		what = fmt.Sprintf("the record after session %s line %d is gone (its end, and any later session)", b.Session, b.Seq)
	default:
		what = fmt.Sprintf("the record from session %s line %d to session %s line %d is gone (the end of one, the start of the other, and any session between)", b.Session, b.Seq+1, a.Session, a.Seq)
	}
	return fmt.Sprintf("stream messages %s: %s", g.Lost, what)
}

// SalvageReport says what a salvage wrote and what it could not.
type SalvageReport struct {
	Lines    int
	Sessions int
	Gaps     []SalvageGap
}

// Salvage writes to w what a damaged stream still holds of the record:
// the audit lines of the sessions that keep chooses (nil: every one), in
// stream order, each followed by '\n', and a gap line
// ([schemas.GapLine]) wherever stream messages were lost, so that the
// record says where it is incomplete and aegis verify never passes it as
// whole. A session whose session.opened was lost is written too when it
// follows a gap after a chosen session (sessions of a state directory
// follow one another). It holds one event at a time. each, if not nil, is
// called per event read.
func Salvage(ctx context.Context, s *events.Store, keep func(id string, so SessionOpened) bool, w io.Writer, each func()) (SalvageReport, error) {
	var (
		rep       SalvageReport
		chosen    = map[string]bool{} // sessions seen, and whether they are written
		lastHash  = schemas.GenesisHash
		lastKept  bool      // the last session seen was chosen
		lastEvent string    // the session of the last event read
		place     LinePlace // the last line written
		pending   *SalvageGap
		beforeEv  string // the session of the last event before pending
		marked    bool   // pending touches chosen lines: mark it
		decided   bool   // whether it does is known
	)
	write := func(b []byte) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		_, err := w.Write([]byte{'\n'})
		return err
	}
	mark := func() error {
		gl, err := schemas.GapLine(lastHash, pending.Lost.String())
		if err != nil {
			return err
		}
		if err := write(gl); err != nil {
			return err
		}
		lastHash = schemas.HashHex(gl)
		return nil
	}
	err := s.ReplaySalvage(ctx, func(r events.Record) error {
		if each != nil {
			each()
		}
		e := r.Event
		take, seen := chosen[e.Session]
		if !seen {
			switch {
			case e.Kind == schemas.KindSessionOpened:
				var so SessionOpened
				if json.Unmarshal(e.Payload, &so) != nil {
					return nil
				}
				take = keep == nil || keep(e.Session, so)
			case pending != nil:
				take = lastKept // its open was lost in the gap
			default:
				return nil // a line before its session's open: not from a session writer
			}
			chosen[e.Session] = take
			lastKept = take
			if take {
				rep.Sessions++
			}
		}
		if pending != nil && !decided {
			// The first event after the gap: a gap inside one session
			// that is not written took nothing of this record.
			decided = true
			marked = !(e.Session == beforeEv && !take)
		}
		lastEvent = e.Session
		line, ok := lineOf(e)
		if !ok || !take {
			return nil
		}
		var seq uint64
		if p := lineSeq(line); p != nil {
			seq = *p
		}
		if pending != nil {
			pending.After = LinePlace{e.Session, seq}
			rep.Gaps = append(rep.Gaps, *pending)
			// A session that runs on with the next seq lost no line.
			intact := place.Session == e.Session && seq == place.Seq+1 && e.Kind != schemas.KindSessionOpened
			if marked && !intact {
				if err := mark(); err != nil {
					return err
				}
			}
			pending = nil
		}
		if err := write([]byte(line)); err != nil {
			return err
		}
		rep.Lines++
		lastHash = schemas.HashHex([]byte(line))
		place = LinePlace{e.Session, seq}
		return nil
	}, func(g events.SeqRange) error {
		if pending != nil {
			pending.Lost.To = g.To // two gaps with no line of the record between
			return nil
		}
		pending = &SalvageGap{Lost: g, Before: place}
		beforeEv, decided, marked = lastEvent, false, false
		return nil
	})
	if err != nil {
		return rep, err
	}
	if pending != nil {
		// The stream's end was lost, or nothing of this record followed
		// the gap: its end may be gone.
		rep.Gaps = append(rep.Gaps, *pending)
		if !decided || marked {
			if err := mark(); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// GapsText lists gaps one per line.
func GapsText(gaps []SalvageGap) string {
	var b strings.Builder
	for _, g := range gaps {
		b.WriteString("  " + g.String() + "\n")
	}
	return b.String()
}
