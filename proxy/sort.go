package proxy

import (
	"sort"
	"strconv"
	"strings"
)

func sortPending(calls []*pendingCall) {
	n := func(id string) int {
		v, _ := strconv.Atoi(strings.TrimPrefix(id, "call-"))
		return v
	}
	sort.Slice(calls, func(i, j int) bool { return n(calls[i].call.CallID) < n(calls[j].call.CallID) })
}
