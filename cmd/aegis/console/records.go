package console

import (
	"context"

	"github.com/aegis-dev/aegis/projector"
)

// RecordRow is one record file of the state directory with the verdict
// aegis verify gives it, as last checked.
type RecordRow struct {
	// Path is the live record file, as the sessions recorded to it.
	Path string `json:"path"`
	// Files is how many files were verified as one record: the sealed
	// segments of its rotations, oldest first, and the live file.
	Files int `json:"files"`
	// Verdict is "Verified", "Tampered" or "Indeterminate"; "Unreadable"
	// when a file could not be read, "" before the first check.
	Verdict string `json:"verdict"`
	// Status is the first line aegis verify prints ("Indeterminate:
	// …"), or why the file could not be read.
	Status string `json:"status"`
	// Note says more that the user should know of the verdict (a key
	// that no session of the state directory signed with).
	Note string `json:"note,omitempty"`
	// Lines is how many lines the check read, in all the files.
	Lines int64 `json:"lines"`
	// CheckedAt is when the check began (RFC 3339), "" before the first.
	CheckedAt string `json:"checked_at,omitempty"`
	// Changed says that the files changed since that check: the next
	// one waits its turn (a file is checked at most every few seconds).
	Changed bool `json:"changed,omitempty"`
	// Checkpoint is the last signed checkpoint that the check compared,
	// nil when the record has none.
	Checkpoint *RecordCheckpoint `json:"checkpoint,omitempty"`
}

// RecordCheckpoint is a signed checkpoint of a record file's first lines.
type RecordCheckpoint struct {
	// Name is the file that holds it (RECORD.checkpoints, or a sealed
	// segment's RECORD.checkpoint).
	Name string `json:"name"`
	// Size is how many lines it covers, Root its tree root (base64, as
	// in the note).
	Size int64  `json:"size"`
	Root string `json:"root"`
	// Time is when its file was last written (RFC 3339).
	Time string `json:"time,omitempty"`
	// Count is how many checkpoints of the live file were checked (0 for
	// a segment's seal); Matches says that the file holds what they
	// cover.
	Count   int  `json:"count"`
	Matches bool `json:"matches"`
}

// RecordSource is a [Source] that also shows the record files it knows
// with their verify status. Records must answer at once, from what it
// checked in the background.
type RecordSource interface {
	Records(ctx context.Context) (rows []RecordRow, notes []string, err error)
}

// Fleet is what a hub says of the fleet's hosts.
type Fleet struct {
	// Hub names the hub (its URLs without credentials).
	Hub string `json:"hub"`
	// CheckedAt is when the hub was last asked (RFC 3339).
	CheckedAt string      `json:"checked_at,omitempty"`
	Hosts     []FleetHost `json:"hosts"`
}

// FleetHost is one host of a fleet: its mirror on the hub and whether its
// aegis answers there.
type FleetHost struct {
	Host string `json:"host"`
	// Mirrored says that the hub holds a mirror of the host's stream
	// (the host is enrolled); the fields up to Error describe it.
	Mirrored bool   `json:"mirrored"`
	Messages uint64 `json:"messages"`
	LastSeq  uint64 `json:"last_seq"`
	// LastTime is the time of the mirror's last message (RFC 3339).
	LastTime string `json:"last_time,omitempty"`
	// Lag is how many messages the mirror is behind the host's stream,
	// as the hub last heard; ActiveMS how many milliseconds ago it last
	// heard from the host (-1: never), at Fleet.CheckedAt.
	Lag      uint64 `json:"lag"`
	ActiveMS int64  `json:"active_ms"`
	Error    string `json:"error,omitempty"`
	// Pending is how many approvals its aegis holds, as it answered
	// over the hub.
	Pending int `json:"pending"`
}

// FleetSource is a [Source] that also shows a fleet. Fleet must answer
// at once, from what it asked the hub in the background.
type FleetSource interface {
	Fleet(ctx context.Context) (fleet *Fleet, notes []string, err error)
}

// pollMore adds the record files and the fleet to st, when the source
// shows them: a state without records (null) or fleet has no such
// section.
func (s *Server) pollMore(ctx context.Context, st *state) {
	if rs, ok := s.cfg.Source.(RecordSource); ok {
		rows, notes, err := rs.Records(ctx)
		if err != nil {
			st.Errors = append(st.Errors, "records: "+err.Error())
		}
		if rows == nil {
			rows = []RecordRow{}
		}
		st.Records = rows
		st.Notes = append(st.Notes, notes...)
	}
	if fs, ok := s.cfg.Source.(FleetSource); ok {
		f, notes, err := fs.Fleet(ctx)
		if err != nil {
			st.Errors = append(st.Errors, "fleet: "+err.Error())
		}
		if f == nil {
			f = &Fleet{}
		}
		if f.Hosts == nil {
			f.Hosts = []FleetHost{}
		}
		st.Fleet = f
		st.Notes = append(st.Notes, notes...)
	}
}

// printableMore escapes the host-chosen strings of the records, the
// fleet and the approvals' hosts, as printable does the rest.
func printableMore(st *state) {
	for i := range st.Pending {
		st.Pending[i].Host = projector.Printable(st.Pending[i].Host)
	}
	for i := range st.Records {
		r := &st.Records[i]
		r.Path, r.Status, r.Note = projector.Printable(r.Path), projector.Printable(r.Status), projector.Printable(r.Note)
		if r.Checkpoint != nil {
			c := *r.Checkpoint
			c.Name, c.Root = projector.Printable(c.Name), projector.Printable(c.Root)
			r.Checkpoint = &c
		}
	}
	if st.Fleet != nil {
		f := *st.Fleet
		f.Hub = projector.Printable(f.Hub)
		f.Hosts = append([]FleetHost(nil), f.Hosts...)
		for i := range f.Hosts {
			h := &f.Hosts[i]
			h.Host, h.Error = projector.Printable(h.Host), projector.Printable(h.Error)
		}
		st.Fleet = &f
	}
}
