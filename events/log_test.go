package events

import (
	"fmt"
	"log/slog"
	"testing"
)

// A hub that is away for an hour must not write 3 600 error lines into
// the host's log: the first failed attempt and then one a minute show,
// the rest are debug.
func TestLeafRetriesDoNotFloodTheLog(t *testing.T) {
	const msg = `Error trying to connect as leafnode to remote server "127.0.0.1:7422" (attempt %s): dial tcp 127.0.0.1:7422: connect: connection refused`
	for _, tc := range []struct {
		attempt string
		want    slog.Level
	}{
		{"1", slog.LevelWarn},
		{"2", slog.LevelDebug},
		{"59", slog.LevelDebug},
		{"60", slog.LevelWarn},
		{"61", slog.LevelDebug},
		{"120", slog.LevelWarn},
		{"x", slog.LevelWarn}, // a message of another shape is never hidden
	} {
		got, ok := leafRetry(fmt.Sprintf(msg, tc.attempt))
		if !ok || got != tc.want {
			t.Errorf("attempt %s: %v %v, want %v", tc.attempt, got, ok, tc.want)
		}
	}
	if _, ok := leafRetry("Leafnode connection closed: Duplicate Remote LeafNode Connection"); ok {
		t.Error("another leaf node message taken for a retry")
	}
}
