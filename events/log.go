package events

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// natsLogger routes the embedded server's log lines to slog. Fatalf logs at
// error level and never exits: a library must not end the process.
type natsLogger struct{ l *slog.Logger }

func (n natsLogger) log(level slog.Level, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	// aegis raises max_payload on purpose so that a 16 MiB frame fits in one
	// event; the server's advice against that is noise here.
	if strings.Contains(msg, "exceeds recommended") || strings.Contains(msg, "generally discouraged") {
		level = slog.LevelDebug
	}
	if retry, ok := leafRetry(msg); ok {
		level = retry
	}
	n.l.Log(context.Background(), level, msg, "component", "nats")
}

func (n natsLogger) Noticef(format string, v ...any) { n.log(slog.LevelDebug, format, v...) }
func (n natsLogger) Warnf(format string, v ...any)   { n.log(slog.LevelWarn, format, v...) }
func (n natsLogger) Fatalf(format string, v ...any)  { n.log(slog.LevelError, format, v...) }
func (n natsLogger) Errorf(format string, v ...any)  { n.log(slog.LevelError, format, v...) }
func (n natsLogger) Debugf(format string, v ...any)  { n.log(slog.LevelDebug, format, v...) }
func (n natsLogger) Tracef(format string, v ...any)  { n.log(slog.LevelDebug-4, format, v...) }

// leafRetryEvery is how many of the hub link's failed attempts (one a
// second, see reconnectInterval) go by between two that are logged above
// debug level.
const leafRetryEvery = 60

// leafRetry is the level of the server's message about a failed attempt
// to link to the hub: while the hub is away the server tries every second,
// and a host's log (often the MCP host's own log file) should say so when
// it starts and about once a minute after that, not every second.
func leafRetry(msg string) (slog.Level, bool) {
	if !strings.HasPrefix(msg, "Error trying to connect as leafnode") {
		return 0, false
	}
	_, rest, _ := strings.Cut(msg, "(attempt ")
	num, _, _ := strings.Cut(rest, ")")
	n, err := strconv.Atoi(num)
	if err != nil || n <= 1 || n%leafRetryEvery == 0 {
		return slog.LevelWarn, true
	}
	return slog.LevelDebug, true
}
