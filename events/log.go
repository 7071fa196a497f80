package events

import (
	"context"
	"fmt"
	"log/slog"
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
	n.l.Log(context.Background(), level, msg, "component", "nats")
}

func (n natsLogger) Noticef(format string, v ...any) { n.log(slog.LevelDebug, format, v...) }
func (n natsLogger) Warnf(format string, v ...any)   { n.log(slog.LevelWarn, format, v...) }
func (n natsLogger) Fatalf(format string, v ...any)  { n.log(slog.LevelError, format, v...) }
func (n natsLogger) Errorf(format string, v ...any)  { n.log(slog.LevelError, format, v...) }
func (n natsLogger) Debugf(format string, v ...any)  { n.log(slog.LevelDebug, format, v...) }
func (n natsLogger) Tracef(format string, v ...any)  { n.log(slog.LevelDebug-4, format, v...) }
