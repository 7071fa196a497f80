package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/platform"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const hubUsage = `Usage:
  aegis hub enroll HOST --hub URL[,URL…] [--creds FILE] [--ca FILE] [--replicas N] [--key-out FILE] [--wait 30s] [--reset]
  aegis hub approver NAME [--key-out FILE]

A fleet of aegis proxies keeps each machine's events off the machine too:
each aegis (wrap or gateway, with --hub) links its embedded store to a NATS
hub, a stock JetStream cluster, as a leaf node under a JetStream domain
named after its host, and the hub mirrors that stream. A call still waits
only for the machine's own disk; while the hub is away the events wait on
the machine, and the mirror catches up when it is back.

enroll makes the hub's mirror of HOST's stream, AEGIS_<HOST>: file stored,
N replicas (default 3, one per node of a three-node hub), with delete and
purge denied, mirroring $JS.<HOST>.API's AEGIS. Run it once per host, as
an admin of the hub's JetStream account; --hub takes the hub's client
URLs. It also makes the host's link key (an nkey, written to --key-out,
default HOST.nkey, mode 0600) and prints the hub user to add for it: one
that can link only as a leaf node, receive only its own domain's API
requests and send only its own stream to its own mirror. Through it the
host reaches no JetStream API of the hub, not its own mirror's nor
another host's. It is safe to run again: an existing key is kept and an
existing mirror left as it is if it is the same (refused otherwise). A hub
that has just started answers before its JetStream does: enroll says so and
waits for it, up to --wait.

A host name used again with a new state directory starts its stream again
at 1, while the hub's mirror holds the old stream: aegis on the host refuses
to feed that mirror (it would mix the two) and says so. --reset sets the
mirror aside, copied whole into a stream AEGIS-ASIDE_<HOST>_<time> with
delete and purge denied, and starts a new, empty mirror; restart aegis on
the host to link it.

approver makes a fleet approver's key (an nkey, written to --key-out,
default NAME.nkey, mode 0600) and prints the hub user to add for it: one
that may only ask the hosts' aegis processes for their pending approvals
and send them approve and deny (aegis approvals, approve and deny with
--hub and --hub-nkey), and read the answers. It reaches no stream: it
cannot read or change any host's record, and a host's link key cannot
ask for a decision. Keep approvers' keys apart from the hosts' keys.

docs/fleet.md (aegis help fleet) has the hub's configuration.

Example:
  $ aegis hub enroll laptop-7 --hub nats://hub-1:4222,nats://hub-2:4222 --creds admin.creds
  $ aegis wrap --hub tls://hub-1:7422,tls://hub-2:7422 --host laptop-7 --hub-nkey laptop-7.nkey --audit calls.aarl --signing-key key -- server
  $ aegis hub approver alice
  $ aegis approve --hub nats://hub-1:4222 --hub-nkey alice.nkey apr-gate-dream-7.1
`

// hubFlags are the flags of a command that uses a fleet's hub: one that
// records with it (wrap, gateway: --hub takes its leaf node URLs, and
// --hub-nkey the host's link key) or one that reads a host's mirror on it
// (export, verify, replay: its client URLs; nkey is nil).
type hubFlags struct {
	urls, creds, nkey, ca, host *string
}

func addHubFlags(fs *flag.FlagSet) *hubFlags {
	return &hubFlags{
		urls:  fs.String("hub", "", "link the event store to this NATS hub (leaf node URLs, comma-separated)"),
		creds: fs.String("hub-creds", "", "NATS credentials file for the hub link"),
		nkey:  fs.String("hub-nkey", "", "the host's link key, as aegis hub enroll wrote it"),
		ca:    fs.String("hub-ca", "", "CA bundle (PEM) the hub's certificate must chain to"),
		host:  fs.String("host", "", "this machine's name in the fleet (default: the host name)"),
	}
}

func addReaderFlags(fs *flag.FlagSet) *hubFlags {
	return &hubFlags{
		urls:  fs.String("hub", "", "read the host's mirror on this NATS hub (client URLs, comma-separated)"),
		creds: fs.String("hub-creds", "", "NATS credentials file for the hub"),
		ca:    fs.String("hub-ca", "", "CA bundle (PEM) the hub's certificate must chain to"),
		host:  fs.String("host", "", "the host whose mirror to read"),
	}
}

func (h *hubFlags) set() bool { return *h.urls != "" }

// noneWithout refuses the other hub flags without --hub.
func (h *hubFlags) noneWithout() error {
	if h.set() {
		return nil
	}
	if h.nkey != nil {
		if *h.creds != "" || *h.nkey != "" || *h.ca != "" || *h.host != "" {
			return usagef("add --hub URL", "--hub-creds, --hub-nkey, --hub-ca and --host need --hub")
		}
	} else if *h.creds != "" || *h.ca != "" || *h.host != "" {
		return usagef("add --hub URL", "--hub-creds, --hub-ca and --host need --hub")
	}
	return nil
}

// config returns the store's hub configuration, nil without --hub.
func (h *hubFlags) config() (*events.HubConfig, error) {
	if err := h.noneWithout(); err != nil || !h.set() {
		return nil, err
	}
	var seed []byte
	if *h.nkey != "" {
		var err error
		if seed, err = readSeed(*h.nkey); err != nil {
			return nil, withHint(fmt.Errorf("--hub-nkey: %w", err), "give the file aegis hub enroll wrote for this host (mode 0600)")
		}
		if _, err := events.LeafKeyPublic(seed); err != nil {
			return nil, withHint(fmt.Errorf("--hub-nkey %s: %w", *h.nkey, err), "give the file aegis hub enroll wrote for this host")
		}
	}
	host := *h.host
	if host == "" {
		name, err := os.Hostname()
		if err != nil {
			return nil, usagef("name it with --host NAME", "this machine has no host name: %v", err)
		}
		host, _, _ = strings.Cut(name, ".")
	}
	if !events.ValidHost(host) {
		return nil, usagef("name it with --host NAME: letters, digits, - and _", "host name %q cannot name a host of a fleet", host)
	}
	return &events.HubConfig{URLs: splitURLs(*h.urls), Host: host, Credentials: *h.creds, NkeySeed: string(seed), CAFile: *h.ca}, nil
}

// open opens the mirror of the host the reader flags name.
func (h *hubFlags) open(ctx context.Context, cmd string) (*events.Mirror, error) {
	if *h.host == "" {
		return nil, usagef("aegis "+cmd+" --hub URL --host HOST …", "%s: --hub needs --host, the host whose mirror to read", cmd)
	}
	mirror, err := events.OpenMirror(ctx, events.HubAdmin{URLs: splitURLs(*h.urls), Credentials: *h.creds, CAFile: *h.ca}, *h.host)
	switch {
	case errors.Is(err, events.ErrNotEnrolled):
		return nil, withHint(err, "enroll it with: aegis hub enroll "+*h.host+" --hub URL")
	case err != nil:
		return nil, withHint(err, "--hub takes the hub's client URLs (the port clients use, not the leaf node port)")
	}
	return mirror, nil
}

// checkpointFlags are wrap's and gateway's --checkpoint-lines and
// --checkpoint-interval: how often the record gets a signed checkpoint.
type checkpointFlags struct {
	lines    *int
	interval *time.Duration
	// The witnesses the anchor log's checkpoints go to (anchor.go).
	witnessPolicy   *string
	witnessInterval *time.Duration
}

func addCheckpointFlags(fs *flag.FlagSet) *checkpointFlags {
	return &checkpointFlags{
		lines:           fs.Int("checkpoint-lines", projector.DefaultCheckpointLines, "sign a checkpoint of the record after this many lines"),
		interval:        fs.Duration("checkpoint-interval", projector.DefaultCheckpointInterval, "sign a checkpoint this long after the first line none covers"),
		witnessPolicy:   fs.String("witness-policy", "", "submit the anchor log's checkpoints to the witnesses of this policy file (Sigsum format)"),
		witnessInterval: fs.Duration("witness-interval", projector.DefaultWitnessInterval, "submit to each witness at most this often"),
	}
}

// witnesses returns the witness policy the flags name, nil for none.
func (c *checkpointFlags) witnesses() (*schemas.WitnessPolicy, error) {
	if *c.witnessPolicy == "" {
		return nil, nil
	}
	if *c.witnessInterval < 100*time.Millisecond {
		return nil, usagef("for example --witness-interval 10s", "--witness-interval must be at least 100ms")
	}
	b, err := os.ReadFile(*c.witnessPolicy)
	if err != nil {
		return nil, withHint(fmt.Errorf("read the witness policy: %w", err), "--witness-policy takes a file of witness, group and quorum lines (aegis help verify)")
	}
	p, err := schemas.ParseWitnessPolicy(b)
	if err != nil {
		return nil, withHint(fmt.Errorf("%s: %w", *c.witnessPolicy, err), "a line is: witness NAME VKEY URL, group NAME any|all|K MEMBER…, or quorum NAME (aegis help verify)")
	}
	return p, nil
}

// anchorWitnesses is what --witness-policy and --witness-interval say.
type anchorWitnesses struct {
	policy   *schemas.WitnessPolicy
	interval time.Duration
}

// startAnchor opens the state directory's anchor log, to which every
// record checkpoint is appended, and starts submitting its checkpoints
// to the witnesses of wp (none: nil); stop ends the submissions.
func startAnchor(store *events.Store, key projector.PrivateKey, wp *schemas.WitnessPolicy, every time.Duration, log *slog.Logger) (*projector.Anchor, func(), error) {
	a, err := projector.OpenAnchor(store, key, log)
	if err != nil {
		return nil, nil, fmt.Errorf("anchor log: %w", err)
	}
	stopWitnessing := func() {}
	if wp != nil {
		stopWitnessing = a.StartWitnessing(projector.WitnessingConfig{Policy: wp, Interval: every, Logger: log})
	}
	// The stop saves the anchor log's snapshot: call it before the
	// store closes (once is enough; a deferred call after does nothing).
	var once sync.Once
	return a, func() {
		once.Do(func() {
			stopWitnessing()
			if err := a.Close(); err != nil && !store.Closing() {
				log.Debug("anchor log snapshot not saved", "err", err)
			}
		})
	}, nil
}

// policy returns the checkpoint policy the flags set.
func (c *checkpointFlags) policy() (projector.CheckpointPolicy, error) {
	if *c.lines < 1 {
		return projector.CheckpointPolicy{}, usagef("for example --checkpoint-lines 1024", "--checkpoint-lines must be at least 1")
	}
	if *c.interval < 100*time.Millisecond {
		return projector.CheckpointPolicy{}, usagef("for example --checkpoint-interval 10s", "--checkpoint-interval must be at least 100ms")
	}
	return projector.CheckpointPolicy{Lines: *c.lines, Interval: *c.interval}, nil
}

func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

func (m *Main) runHub(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("aegis hub enroll HOST --hub URL", "hub: missing subcommand")
	}
	if args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(m.Stdout, hubUsage)
		return nil
	}
	switch args[0] {
	case "enroll":
		return m.hubEnroll(ctx, args[1:])
	case "approver":
		return m.hubApprover(args[1:])
	}
	return usagef("aegis hub enroll HOST --hub URL, or aegis hub approver NAME", "hub: unknown subcommand %q", args[0])
}

// hubApprover makes a fleet approver's key and prints its hub user.
func (m *Main) hubApprover(args []string) error {
	fs := m.newFlagSet("hub approver")
	keyOut := fs.String("key-out", "", "where to write the approver's key (default NAME.nkey; an existing one is kept)")
	name, err := m.parseNamed(fs, "hub approver", "aegis hub approver NAME", args)
	if err != nil {
		return err
	}
	if name == "" {
		return usagef("aegis hub approver NAME", "hub approver: needs a NAME for the key file")
	}
	if *keyOut == "" {
		*keyOut = name + ".nkey"
	}
	public, said, err := hostKey(*keyOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "approver %s: its key is %s (%s); keep it private (mode 0600) and give it to aegis approvals, approve and deny with --hub-nkey\n\n", name, *keyOut, said)
	fmt.Fprintf(m.Stdout, "add this user to the users of the hub's JetStream account on every node, then reload them (nats-server --signal reload):\n%s\n\n", events.FleetApproverUser(public))
	fmt.Fprintf(m.Stdout, "then: aegis approvals --hub CLIENT_URLS --hub-nkey %s\n", filepath.Base(*keyOut))
	return nil
}

// hubEnroll makes a host's mirror and link key.
func (m *Main) hubEnroll(ctx context.Context, args []string) error {
	fs := m.newFlagSet("hub enroll")
	urls := fs.String("hub", "", "the hub's client URLs, comma-separated")
	creds := fs.String("creds", "", "NATS credentials file of a hub admin")
	ca := fs.String("ca", "", "CA bundle (PEM) for tls:// URLs")
	replicas := fs.Int("replicas", 3, "replicas of the mirror")
	keyOut := fs.String("key-out", "", "where to write the host's link key (default HOST.nkey; an existing one is kept)")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for the hub and its JetStream to answer")
	reset := fs.Bool("reset", false, "set the host's mirror aside (copied whole, nothing deleted) and start a new one: for a host name that now names another state directory")
	host, err := m.parseNamed(fs, "hub enroll", "aegis hub enroll HOST --hub URL", args)
	if err != nil {
		return err
	}
	if host == "" || *urls == "" {
		return usagef("aegis hub enroll HOST --hub URL", "hub enroll: needs one HOST and --hub")
	}
	if *replicas < 1 || *replicas > 5 {
		return usagef("--replicas 1 to 5 (JetStream's limit)", "hub enroll: --replicas %d", *replicas)
	}
	timeout := *wait
	if *reset {
		timeout += 10 * time.Minute // copying a large mirror aside takes its time
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	admin := events.HubAdmin{URLs: splitURLs(*urls), Credentials: *creds, CAFile: *ca}
	opts := events.EnrollOptions{
		Replicas: *replicas,
		Waiting: func(why error) {
			fmt.Fprintf(m.Stderr, "aegis: waiting up to %s for the hub and its JetStream to answer (a hub that has just started elects its leaders first); now: %v\n", *wait, why)
		},
	}
	var enrolled events.Enrolled
	aside := ""
	if *reset {
		aside, err = events.ResetMirror(ctx, admin, host, opts)
	} else {
		enrolled, err = events.Enroll(ctx, admin, host, opts)
	}
	switch {
	case errors.Is(err, events.ErrMirrorConflict):
		return withHint(err, "it was made by hand or with other settings; look at it with the nats CLI before you remove anything")
	case errors.Is(err, events.ErrJetStreamNotReady):
		return withHint(err, "the URLs reach the hub; wait until its nodes have formed their cluster (nats-server logs \"JetStream cluster new metadata leader\"), or give it longer with --wait")
	case err != nil:
		return withHint(err, "--hub takes the hub's client URLs (the port clients use, not the leaf node port), and enroll needs rights to create streams in the hub's JetStream account")
	}
	name := events.MirrorName(host)
	if *keyOut == "" {
		*keyOut = host + ".nkey"
	}
	public, said, err := hostKey(*keyOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "enrolled %s: the hub mirrors its stream as %s (%d replicas, delete and purge denied)\n\n", host, name, *replicas)
	if aside != "" {
		fmt.Fprintf(m.Stdout, "the old mirror's messages are kept in the stream %s (delete and purge denied); %s's new mirror starts empty: restart aegis on %s so that it links to it\n\n", aside, host, host)
	}
	if enrolled.Legacy {
		fmt.Fprintf(m.Stdout, "note: %s was made by an earlier aegis: it pulls again after %s links again only on the hub's retry backoff (up to 2 minutes), not at once\n\n", name, host)
	}
	fmt.Fprintf(m.Stdout, "its link key: %s (%s); copy it to %s, mode 0600, and give it there with --hub-nkey\n\n", *keyOut, said, host)
	fmt.Fprintf(m.Stdout, "add this user to the users of the hub's JetStream account on every node, then reload them (nats-server --signal reload):\n%s\n\n", events.LeafUser(host, public))
	fmt.Fprintf(m.Stdout, "the hub's configuration must also set: feature_flags { js_api_reply_v2: true }\n\n")
	fmt.Fprintf(m.Stdout, "on %s: aegis wrap|gateway --hub LEAF_URLS --host %s --hub-nkey %s …\n", host, host, filepath.Base(*keyOut))
	return nil
}

// parseNamed parses a hub subcommand's NAME (before or after its flags)
// and flags; the name, "" when none was given, is a valid host name.
func (m *Main) parseNamed(fs *flag.FlagSet, cmd, synopsis string, args []string) (string, error) {
	name := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:] // NAME first, as the usage shows
	}
	if err := m.parseFlags(fs, hubUsage, args); err != nil {
		return "", err
	}
	if name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return "", usagef(synopsis, "%s: unexpected argument %q", cmd, fs.Arg(0))
	}
	if name != "" && !events.ValidHost(name) {
		return "", usagef("letters, digits, - and _, at most 63", "%s: name %q: use letters, digits, - and _", cmd, name)
	}
	return name, nil
}

// hostKey returns the public key of the nkey at path (a host's link key or
// an approver's key), making it (mode 0600, never replacing a file) when
// there is none, and says which it did.
func hostKey(path string) (public, said string, err error) {
	if seed, err := readSeed(path); err == nil {
		public, err := events.LeafKeyPublic(seed)
		if err != nil {
			return "", "", withHint(fmt.Errorf("the key %s: %w", path, err), "move it away to make a new one")
		}
		return public, "kept: it was there", nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", "", err
	}
	seed, public, err := events.NewLeafKey()
	if err != nil {
		return "", "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", "", fmt.Errorf("write the key: %w", err)
	}
	_, err = f.Write(append(seed, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return public, "new", err
}

// readSeed reads an nkey seed file, which must be private to its owner.
func readSeed(path string) ([]byte, error) {
	b, err := projector.ReadPrivateFile(path, 4096)
	if errors.Is(err, projector.ErrKeyFilePermissions) {
		return nil, withHint(fmt.Errorf("the link key %w", err), platform.FixCommand(path, false))
	}
	return bytes.TrimSpace(b), err
}
