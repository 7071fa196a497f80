package events

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MirrorStatus is what a hub says of its mirror of one host's stream
// ([MirrorConfig]): what it holds, and how its pull from the host goes.
type MirrorStatus struct {
	Host string
	// Msgs and Bytes are what the mirror holds; LastSeq and LastTime are
	// its last message's sequence (the host stream's) and time, zero when
	// it holds none.
	Msgs, Bytes uint64
	LastSeq     uint64
	LastTime    time.Time
	// Lag is how many messages the mirror is behind the host's stream, as
	// the hub last learnt it from the host (JetStream's mirror info); it
	// is only as fresh as Active says.
	Lag uint64
	// Active is how long ago the mirror last heard from the host's
	// stream; negative when it never did.
	Active time.Duration
	// Error is the error the hub reports for the mirror's pull, "" when
	// it reports none.
	Error string
}

// HubReader is a connection to a hub that reads what its JetStream says
// of the hosts' mirrors. It needs a user that may use the hub's
// JetStream API (a fleet approver's key may not, see
// [FleetApproverUser]).
type HubReader struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// DialHubReader connects to the hub's client URLs with admin's
// credentials. The connection reconnects on its own while the hub is
// down.
func DialHubReader(ctx context.Context, admin HubAdmin) (*HubReader, error) {
	nc, err := admin.dial(ctx, "aegis hub reader", nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &HubReader{nc: nc, js: js}, nil
}

// Close closes the connection.
func (r *HubReader) Close() { r.nc.Close() }

// Mirrors returns the status of every mirror of a host's stream that the
// hub holds (the streams AEGIS_<host> that mirror a stream AEGIS), in host
// order. Other streams of the account are passed over.
func (r *HubReader) Mirrors(ctx context.Context) ([]MirrorStatus, error) {
	list := r.js.ListStreams(ctx)
	var out []MirrorStatus
	for info := range list.Info() {
		host, ok := strings.CutPrefix(info.Config.Name, StreamName+"_")
		if !ok || !ValidHost(host) || info.Config.Mirror == nil || info.Config.Mirror.Name != StreamName {
			continue
		}
		st := MirrorStatus{Host: host, Msgs: info.State.Msgs, Bytes: info.State.Bytes, LastSeq: info.State.LastSeq, Active: -1}
		if info.State.LastSeq > 0 {
			st.LastTime = info.State.LastTime
		}
		if m := info.Mirror; m != nil {
			st.Lag, st.Active = m.Lag, m.Active
			if m.Error != nil {
				st.Error = m.Error.Error()
			}
		}
		out = append(out, st)
	}
	if err := list.Err(); err != nil {
		return out, fmt.Errorf("list the hub's mirrors: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out, nil
}
