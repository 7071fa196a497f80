package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/proxy"
)

const wrapUsage = `Usage:
  aegis wrap --audit PATH --signing-key PATH [--state-dir DIR] -- CMD [ARGS…]

Runs the MCP server CMD and relays its stdio with the host byte for byte,
recording every frame in the state directory's event stream and every
tools/call as a signed, hash-chained audit record:

  - a tools/call reaches the server only after its intent is on disk;
  - its answer reaches the host only after its outcome is on disk;
  - the record is projected to --audit (schema v2 JSON lines), which
    'aegis verify' checks offline and 'aegis export' can rebuild.

--audit and --signing-key are both required (make a key with 'aegis
keygen'). The key is loaded and the store opened before the server starts:
a wrap that cannot record never starts a server. '--' ends aegis's flags;
everything after it is the server's argv, --help included.

The server's stderr passes through to aegis's stderr. SIGINT and SIGTERM
are forwarded to it (a second one kills it). aegis exits with the server's
exit status (128+N if a signal N ended it), 1 if recording failed, 127 if
the server could not be started.

Example:
  $ aegis keygen --out key
  $ aegis wrap --audit calls.aarl --signing-key key -- npx -y @modelcontextprotocol/server-everything
`

func (m *Main) runWrap(ctx context.Context, args []string) error {
	dash := -1
	for i, a := range args {
		if a == "--" {
			dash = i
			break
		}
	}
	flagArgs, argv := args, []string(nil)
	if dash >= 0 {
		flagArgs, argv = args[:dash], args[dash+1:]
	}
	fs := m.newFlagSet("wrap")
	audit := fs.String("audit", "", "record file")
	keyPath := fs.String("signing-key", "", "signing key file")
	stateDir := fs.String("state-dir", "", "state directory")
	grace := fs.Duration("grace", proxy.DefaultGrace, "how long the server may answer after the host closed stdin")
	if err := m.parseFlags(fs, wrapUsage, flagArgs); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("aegis wrap --audit PATH --signing-key PATH -- "+fs.Arg(0)+" …", "wrap takes no positional arguments; put the server command after `--` (got %q)", fs.Arg(0))
	}
	if dash < 0 || len(argv) == 0 {
		return usagef("aegis wrap --audit PATH --signing-key PATH -- CMD [ARGS…]", "wrap requires a server command after `--`")
	}
	if *audit == "" || *keyPath == "" {
		return usagef("make a key with 'aegis keygen --out KEY', then: aegis wrap --audit calls.aarl --signing-key KEY -- CMD", "wrap needs both --audit and --signing-key")
	}

	key, err := projector.LoadKeyFile(*keyPath)
	if err != nil {
		switch {
		case errors.Is(err, projector.ErrKeyFilePermissions):
			return withHint(fmt.Errorf("refusing signing key: %w", err), "chmod 600 "+*keyPath)
		case errors.Is(err, projector.ErrInsecureDevKey):
			return withHint(fmt.Errorf("refusing signing key: %w", err), "generate a real one with: aegis keygen --out KEY")
		case errors.Is(err, os.ErrNotExist):
			return withHint(fmt.Errorf("signing key %s does not exist", *keyPath), "generate one with: aegis keygen --out "+*keyPath)
		}
		return withHint(fmt.Errorf("refusing signing key: %w", err), "a key file is one line of 64 lowercase hex characters, as 'aegis keygen' writes it")
	}
	store, err := m.openStore(ctx, *stateDir)
	if err != nil {
		return err
	}
	defer store.Close(context.Background())
	log := m.logger()

	sess, err := projector.OpenSession(ctx, projector.SessionConfig{
		Store: store, Key: key, AuditPath: *audit, Argv: argv, Version: Version, Logger: log,
	})
	if err != nil {
		switch {
		case errors.Is(err, projector.ErrRecordDiverged):
			return withHint(fmt.Errorf("will not append to %s: %w", *audit, err), "keep that file as evidence and check it with 'aegis verify'; use a new --audit path, or rebuild the record with 'aegis export'")
		case errors.Is(err, projector.ErrTornTail):
			return withHint(fmt.Errorf("will not append to %s: %w", *audit, err), "the last write to it was cut short; check it with 'aegis verify' and use a new --audit path")
		}
		return fmt.Errorf("open audit session: %w", err)
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	res, werr := proxy.Wrap(ctx, proxy.WrapConfig{
		Session: sess, Stdin: m.Stdin, Stdout: m.Stdout, Stderr: m.Stderr,
		Argv: argv, Signals: sigs, Grace: *grace, Logger: log,
	})
	var se *proxy.StartError
	if werr != nil && !errors.As(werr, &se) {
		sess.Abandon()
		return &exitError{code: 1, err: werr, hint: "the record holds everything acknowledged before the failure; 'aegis verify' will report the session as unfinished"}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sess.Close(cctx); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("close audit session: %w", err)}
	}
	if err := store.Close(cctx); err != nil {
		return &exitError{code: 1, err: err}
	}
	if se != nil {
		return &exitError{code: 127, err: se, hint: "check the command after `--`; the record holds an open and a close line for this attempt"}
	}
	if res.ServerExitedFirst {
		m.warnf("the server exited (status %d) before the host closed stdin", res.ExitCode)
	}
	if res.ExitCode != 0 {
		return &exitError{code: res.ExitCode}
	}
	return nil
}
