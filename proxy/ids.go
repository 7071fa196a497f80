package proxy

import (
	"encoding/json"

	"github.com/aegis-dev/aegis/proxy/rpc"
)

// ReqID is a host request's id, under the exact reading and the loose one
// hosts match answers by (see LooseID).
type ReqID struct {
	Key     string
	loose   float64
	LooseOK bool
}

func NewReqID(key string, raw json.RawMessage) ReqID {
	l, ok := rpc.LooseID(raw)
	return ReqID{Key: key, loose: l, LooseOK: ok}
}

// Same reports whether a and b name one request to some reader.
func (a ReqID) Same(b ReqID) bool {
	return a.Key != "" && a.Key == b.Key || a.LooseOK && b.LooseOK && a.loose == b.loose
}
