package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const pinsUsage = `Usage:
  aegis pins [--server SERVER] [--state-dir DIR | --name NAME] [--json]
  aegis pins reset [--server SERVER] [--tool TOOL] [--state-dir DIR | --name NAME]

Lists the tool pins of the state directory: each server's tools, pinned to
the SHA-256 digest of their definitions (name, title, description,
inputSchema, outputSchema, annotations; RFC 8785 canonical JSON) when aegis
first saw them. A server is keyed by its command line in aegis wrap and by
its config name in aegis gateway. A definition that later differs, and a
tool added after the first pin, is a change: it is recorded, and under a
policy handled as its on_tool_change says (pending_approval by default:
refused until 'aegis approve ID' pins the new definition). See
docs/pins.md.

  SERVER  TOOL  DIGEST  SINCE  SESSION

--json prints a JSON array of {server, tool, digest, fields, since,
session, reason}.

reset removes pins, recorded as a pins.reset event: every server's, or
--server's, or only --tool's of it (--tool alone when the state directory
pins one server, as each of aegis init's does). The next session of that server pins
those tools again at first sight. reset needs the state directory to
itself: while an aegis process holds it, a changed tool is accepted in that
session with 'aegis approve' instead (see 'aegis approvals').

Example:
  $ aegis pins
  $ aegis pins --name server-everything
  $ aegis pins reset --name server-everything --tool echo
`

func (m *Main) runPins(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "reset" {
		return m.pinsReset(ctx, args[1:])
	}
	fs := m.newFlagSet("pins")
	sc := addStateChoice(fs)
	dir := sc.dir
	server := fs.String("server", "", "only this server's pins")
	asJSON := fs.Bool("json", false, "print a JSON array")
	if err := m.parseFlags(fs, pinsUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("aegis pins [--server SERVER] or aegis pins reset …", "pins: unknown argument %q", fs.Arg(0))
	}
	if err := m.chooseStateDir(sc); err != nil {
		return err
	}
	ix, _, done, err := m.stateIndex(ctx, *dir, "pins")
	if err != nil {
		return err
	}
	defer done()
	pins := ix.Pins(*server)
	w := bufio.NewWriter(m.Stdout)
	defer w.Flush()
	if *asJSON {
		if pins == nil {
			pins = []projector.Pin{}
		}
		b, err := json.MarshalIndent(pins, "", "  ")
		if err != nil {
			return err
		}
		w.Write(append(b, '\n'))
		return nil
	}
	if len(pins) == 0 {
		what := "no tool is pinned"
		if *server != "" {
			what = "no tool of server " + projector.Printable(*server) + " is pinned"
		}
		fmt.Fprintf(m.Stderr, "aegis: %s yet: tools are pinned when a session lists them\n", what)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tTOOL\tDIGEST\tSINCE\tSESSION")
	for _, p := range pins {
		name := projector.Printable(p.Tool)
		if p.Kind != "" {
			name = p.Kind + ":" + name // a prompt, resource template or the instructions
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", projector.Printable(p.Server), name, p.Digest[:min(16, len(p.Digest))],
			p.Since.Local().Format(time.DateTime), p.Session)
	}
	return tw.Flush()
}

func (m *Main) pinsReset(ctx context.Context, args []string) error {
	fs := m.newFlagSet("pins reset")
	sc := addStateChoice(fs)
	dir := sc.dir
	server := fs.String("server", "", "only this server's pins")
	tool := fs.String("tool", "", "only this tool's pin (needs --server when several servers are pinned)")
	if err := m.parseFlags(fs, pinsUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("aegis pins reset [--server SERVER] [--tool TOOL]", "pins reset: unknown argument %q", fs.Arg(0))
	}
	if err := m.chooseStateDir(sc); err != nil {
		return err
	}
	st, err := m.openStore(ctx, *dir)
	if err != nil {
		var le *events.LockedError
		if errors.As(err, &le) {
			return withHint(fmt.Errorf("pins reset: %w", le), "end that session first; to accept a changed tool while it runs, approve its re-pin: aegis approvals, then aegis approve ID")
		}
		return err
	}
	defer st.Close(context.Background())
	ix, err := projector.LoadIndex(ctx, st, m.logger(), nil)
	if err != nil {
		return err
	}
	if *tool != "" && *server == "" {
		// A state directory of aegis init's holds one server: --tool
		// alone names the tool of that one.
		var servers []string
		for _, p := range ix.Pins("") {
			if !slices.Contains(servers, p.Server) {
				servers = append(servers, p.Server)
			}
		}
		if len(servers) != 1 {
			return usagef("aegis pins reset --server SERVER --tool TOOL (see 'aegis pins' for the servers)",
				"pins reset --tool needs --server: this state directory pins the tools of %d servers", len(servers))
		}
		*server = servers[0]
	}
	pins := ix.Pins(*server)
	var resets []schemas.PinsReset
	seen := map[string]bool{}
	for _, p := range pins {
		switch {
		case *tool != "":
			if p.Tool == *tool {
				resets = append(resets, schemas.PinsReset{Kind: p.Kind, Server: p.Server, Tool: p.Tool, By: m.requester()})
			}
		case !seen[p.Server]:
			seen[p.Server] = true
			resets = append(resets, schemas.PinsReset{Server: p.Server, By: m.requester()})
		}
	}
	if len(resets) == 0 {
		return withHint(errors.New("pins reset: no such pin"), "list the pins with: aegis pins")
	}
	sess, err := st.NewSession()
	if err != nil {
		return err
	}
	for _, r := range resets {
		ev, err := st.NewEvent(sess, schemas.KindPinsReset, r)
		if err != nil {
			return err
		}
		if _, err := st.Append(ctx, ev); err != nil {
			return fmt.Errorf("pins reset: %w", err)
		}
		what := "every pin of server " + projector.Printable(r.Server)
		if r.Tool != "" {
			what = "the pin of " + projector.Printable(r.Tool) + " of server " + projector.Printable(r.Server)
		}
		fmt.Fprintf(m.Stdout, "reset %s; its next session pins it again at first sight\n", what)
	}
	if err := ix.Update(ctx, st, nil); err == nil {
		ix.Save(ctx, st) // a cache: the next start folds what this did not
	}
	return nil
}
