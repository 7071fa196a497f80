package events

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// A fleet. With a [HubConfig] the embedded server is also a leaf node of
// a NATS hub (a stock JetStream cluster), under a JetStream domain named
// after the host, so the hub reaches this stream as $JS.<host>.API. The
// hub keeps a mirror of it, AEGIS_<host>, which a hub admin creates
// ([MirrorConfig]); the mirror pulls, so nothing here waits for the hub:
// a commit is acknowledged by the local stream alone, and while the link
// is down the events wait here and the mirror catches up, in order and
// once each, when it is back.

// HubConfig links the embedded server to a hub.
type HubConfig struct {
	// URLs are the hub's leaf node URLs (nats://, tls://), one per
	// node; the link fails over between them.
	URLs []string
	// Host names this machine in the fleet: the JetStream domain and the
	// mirror's name. See [ValidHost].
	Host string
	// Credentials is a NATS credentials file (JWT) for the link, "" for
	// none.
	Credentials string
	// NkeySeed is the seed of the host's nkey ([NewLeafKey]), which
	// signs the link's connect, "" for none.
	NkeySeed string
	// CAFile is a PEM bundle the hub's certificate must chain to, for
	// tls:// URLs; "" uses the system's roots.
	CAFile string
}

// hostPattern is compiled at first use, not by every aegis process at
// start-up: the counted repetition is a program of about 60 KiB.
var hostPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,62}$`) })

// ValidHost reports whether host can name a host of a fleet: letters,
// digits, '-' and '_', 1 to 63 of them, not starting with '-' or '_' (it
// is a JetStream domain and part of a stream name and of subjects).
func ValidHost(host string) bool { return hostPattern().MatchString(host) }

// MirrorName is the name of the hub's mirror of host's stream.
func MirrorName(host string) string { return StreamName + "_" + host }

func (h *HubConfig) apply(opts *server.Options) error {
	if !ValidHost(h.Host) {
		return fmt.Errorf("hub: host name %q: use letters, digits, - and _ (at most 63)", h.Host)
	}
	if len(h.URLs) == 0 {
		return errors.New("hub: no URL")
	}
	remote := &server.RemoteLeafOpts{Credentials: h.Credentials, Nkey: h.NkeySeed}
	for _, u := range h.URLs {
		pu, err := url.Parse(u)
		if err != nil || pu.Host == "" {
			return fmt.Errorf("hub: %q is not a URL such as nats://hub.example:7422", u)
		}
		switch pu.Scheme {
		case "nats":
		case "tls":
			remote.TLS = true
		default:
			return fmt.Errorf("hub: %q: the scheme is nats:// or tls://", u)
		}
		remote.URLs = append(remote.URLs, pu)
	}
	if remote.TLS || h.CAFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if h.CAFile != "" {
			pem, err := os.ReadFile(h.CAFile)
			if err != nil {
				return fmt.Errorf("hub: CA bundle: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("hub: CA bundle %s holds no PEM certificate", h.CAFile)
			}
			cfg.RootCAs = pool
		}
		remote.TLS, remote.TLSConfig = true, cfg
	}
	// What is this machine's alone stays off the link whatever the hub's
	// configuration says: the stream's subjects (a hub, or another host
	// through it, could otherwise write into the stream or take its
	// writes, and their acknowledgements), the inboxes of the store and
	// of its readers, and the local approval channel.
	remote.DenyImports = localSubjects
	remote.DenyExports = localSubjects
	opts.JetStreamDomain = h.Host
	// The hub tells its leaves apart by server name: two leaves of one
	// name are taken for one server reconnecting, and each link drops
	// the other's.
	opts.ServerName = "aegis-" + h.Host
	// Flow control subjects name the domain ($JS.FC.<host>.…): the hub
	// routes the mirrors' replies of every host to every host that uses
	// the old form, and this one must tell its own mirror's apart
	// (hublink.go).
	if opts.FeatureFlags == nil {
		opts.FeatureFlags = map[string]bool{}
	}
	opts.FeatureFlags["js_ack_fc_v2"] = true
	opts.LeafNode.Remotes = append(opts.LeafNode.Remotes, remote)
	opts.LeafNode.ReconnectInterval = reconnectInterval
	return nil
}

// localSubjects never cross the leaf link, in either direction.
var localSubjects = []string{"aegis.>", "_INBOX.>", "aegis-approve.>", "aegis-approve-reply.>", StoredPrefix + ".>", ReadReplyPrefix + ".>"}

// reconnectInterval is how often the leaf tries the hub again while the
// link is down.
const reconnectInterval = time.Second

// MirrorConfig is the hub's mirror of host's stream: replicated, file
// stored, with delete and purge denied, so neither the host nor anyone
// with only stream-level rights can rewrite what reached the hub.
func MirrorConfig(host string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        MirrorName(host),
		Description: "aegis events of host " + host + ", mirrored from its own stream",
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		DenyDelete:  true,
		DenyPurge:   true,
		Mirror: &jetstream.StreamSource{
			Name: StreamName,
			External: &jetstream.ExternalStream{
				APIPrefix: "$JS." + host + ".API",
				// The host's messages come to a subject of its own, so
				// that its credentials can be let publish there and
				// nowhere else (see LeafUser).
				DeliverPrefix: DeliverPrefix(host),
			},
			// A durable source: the host keeps the consumer
			// (hublink.go), so the hub pulls again as soon as the host
			// links again instead of on its retry backoff.
			Consumer: &jetstream.StreamConsumerSource{Name: MirrorConsumer, DeliverSubject: MirrorDeliverSubject(host)},
		},
	}
}

// legacyMirrorConfig is the mirror enroll made before durable sources:
// the hub made a consumer of its own on the host's stream at each pull,
// and pulled again after a link came back only on its retry backoff.
func legacyMirrorConfig(host string, replicas int) jetstream.StreamConfig {
	cfg := MirrorConfig(host, replicas)
	m := *cfg.Mirror
	m.Consumer = nil
	cfg.Mirror = &m
	return cfg
}

// HubAdmin connects to a hub's client URLs as an admin of its JetStream.
type HubAdmin struct {
	URLs        []string
	Credentials string // NATS credentials file, "" for none
	NkeySeed    string // an nkey seed to sign the connect with, "" for none
	CAFile      string // PEM bundle for tls:// URLs, "" for the system's
}

// ErrMirrorConflict is returned by [Enroll] when the hub holds a stream of
// the mirror's name with other settings.
var ErrMirrorConflict = errors.New("the hub holds a stream of that name that is not this mirror")

// EnrollOptions are the settings of [Enroll].
type EnrollOptions struct {
	// Replicas of the mirror (one per node of the hub, up to 5).
	Replicas int
	// Waiting, if set, is called once when the hub or its JetStream does
	// not answer at once (a hub that has just started listens, then
	// elects its leaders), with what it answered; Enroll waits for them
	// until ctx ends.
	Waiting func(error)
}

// Enrolled says what [Enroll] found or made.
type Enrolled struct {
	// Legacy is set when the hub holds the host's mirror as enroll made
	// it before durable sources: it is left as it is, and pulls again
	// after the host links again only on the hub's retry backoff.
	Legacy bool
}

// ErrJetStreamNotReady is wrapped by [Enroll]'s error when the hub
// accepted the connection but its JetStream did not answer in time.
var ErrJetStreamNotReady = errors.New("the hub's JetStream did not answer")

// Enroll makes the hub's mirror of host's stream ([MirrorConfig]). A
// mirror that is there with the same settings (or with the settings of an
// earlier release, see [Enrolled]) is left as it is. It waits for the
// hub's JetStream to answer until ctx ends.
func Enroll(ctx context.Context, admin HubAdmin, host string, opts EnrollOptions) (Enrolled, error) {
	if !ValidHost(host) {
		return Enrolled{}, fmt.Errorf("host name %q: use letters, digits, - and _ (at most 63)", host)
	}
	said := false
	waiting := func(why error) {
		if !said && opts.Waiting != nil {
			opts.Waiting(why)
		}
		said = true
	}
	var nc *nats.Conn
	for {
		var err error
		if nc, err = admin.dial(ctx, "aegis hub enroll"); err == nil {
			break
		}
		if !errors.Is(err, nats.ErrNoServers) {
			return Enrolled{}, err
		}
		// No node answered: one that has just started may not listen
		// yet.
		waiting(err)
		select {
		case <-ctx.Done():
			return Enrolled{}, err
		case <-time.After(250 * time.Millisecond):
		}
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Enrolled{}, err
	}
	if err := waitJetStream(ctx, js, waiting); err != nil {
		return Enrolled{}, err
	}
	cfg := MirrorConfig(host, opts.Replicas)
	_, err = js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		// Made by an earlier release: the same but for the durable
		// source (a mirror's source cannot be changed).
		if _, lerr := js.CreateStream(ctx, legacyMirrorConfig(host, opts.Replicas)); lerr == nil {
			return Enrolled{Legacy: true}, nil
		}
		return Enrolled{}, fmt.Errorf("%s: %w", cfg.Name, ErrMirrorConflict)
	} else if err != nil {
		return Enrolled{}, fmt.Errorf("create the mirror %s: %w", cfg.Name, err)
	}
	return Enrolled{}, nil
}

// AsidePrefix begins the name of a mirror's copy that [ResetMirror] set
// aside: AEGIS-ASIDE_<host>_<UTC time>. It is no mirror of a host's
// stream ([HubReader.Mirrors] passes it over).
const AsidePrefix = "AEGIS-ASIDE_"

// ResetMirror sets the hub's mirror of host aside and makes a new, empty
// one ([Enroll]): for a host name that now names another stream (a state
// directory made again), whose leaf refuses the old mirror
// ([MirrorAheadError]). Nothing the hub held is lost: the old mirror is
// first copied whole into a stream of its own, named after [AsidePrefix],
// with delete and purge denied, and removed only once the copy holds every
// message of it. It returns the copy's name, "" when there was no mirror
// to set aside. opts.Waiting is as for Enroll.
func ResetMirror(ctx context.Context, admin HubAdmin, host string, opts EnrollOptions) (string, error) {
	if !ValidHost(host) {
		return "", fmt.Errorf("host name %q: use letters, digits, - and _ (at most 63)", host)
	}
	nc, err := admin.dial(ctx, "aegis hub enroll --reset")
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	waiting := func(why error) {
		if opts.Waiting != nil {
			opts.Waiting(why)
			opts.Waiting = nil
		}
	}
	if err := waitJetStream(ctx, js, waiting); err != nil {
		return "", err
	}
	name := MirrorName(host)
	aside := ""
	old, err := js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return "", fmt.Errorf("read the mirror %s: %w", name, err)
	default:
		info := old.CachedInfo()
		if info.Config.Mirror == nil || info.Config.Mirror.Name != StreamName {
			return "", fmt.Errorf("%s: %w", name, ErrMirrorConflict)
		}
		aside = AsidePrefix + host + "_" + time.Now().UTC().Format("20060102T150405Z")
		cfg := jetstream.StreamConfig{
			Name:        aside,
			Description: "aegis events of host " + host + " that its mirror held until aegis hub enroll --reset set them aside",
			Storage:     jetstream.FileStorage,
			Replicas:    info.Config.Replicas,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardNew,
			MaxMsgs:     -1,
			MaxBytes:    -1,
			DenyDelete:  true,
			DenyPurge:   true,
			Mirror:      &jetstream.StreamSource{Name: name},
		}
		copied, err := js.CreateStream(ctx, cfg)
		if err != nil {
			return "", fmt.Errorf("copy the mirror %s aside: %w", name, err)
		}
		// The copy holds every message of the mirror before the mirror
		// goes; then it stops following it.
		for {
			now, err := old.Info(ctx)
			if err != nil {
				return "", fmt.Errorf("read the mirror %s: %w", name, err)
			}
			got, err := copied.Info(ctx)
			if err != nil {
				return "", fmt.Errorf("read the copy %s: %w", aside, err)
			}
			if got.State.LastSeq == now.State.LastSeq && got.State.Msgs == now.State.Msgs {
				break
			}
			select {
			case <-ctx.Done():
				return "", fmt.Errorf("copy the mirror %s aside: the copy %s holds %d of its %d messages: %w (the mirror is left as it was)",
					name, aside, got.State.Msgs, now.State.Msgs, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		cfg.Mirror = nil
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return "", fmt.Errorf("make the copy %s a stream of its own: %w (the mirror is left as it was)", aside, err)
		}
		if err := js.DeleteStream(ctx, name); err != nil {
			return "", fmt.Errorf("remove the mirror %s (its copy is %s): %w", name, aside, err)
		}
	}
	if _, err := Enroll(ctx, admin, host, opts); err != nil {
		return aside, err
	}
	return aside, nil
}

// waitJetStream waits until the hub's JetStream answers for the
// account, calling waiting once (if set) when it does not at once.
func waitJetStream(ctx context.Context, js jetstream.JetStream, waiting func(error)) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
			return fmt.Errorf("%w: JetStream is not enabled for this account on the hub (the hub's admin account needs jetstream: enabled)", err)
		case errors.Is(err, nats.ErrPermissionViolation), errors.Is(err, nats.ErrAuthorization):
			return fmt.Errorf("the hub refused its JetStream API to these credentials: %w", err)
		}
		waiting(err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (a hub that has just started needs a few seconds to elect its leaders): %w", ErrJetStreamNotReady, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// connect connects to the hub as the admin.
func (a HubAdmin) connect(name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := a.dial(context.Background(), name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// dial connects to the hub's client URLs with a's credentials.
func (a HubAdmin) dial(ctx context.Context, name string, extra ...nats.Option) (*nats.Conn, error) {
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return nil, ctx.Err()
	}
	opts := append([]nats.Option{nats.Name(name), nats.Timeout(timeout)}, extra...)
	if a.Credentials != "" {
		opts = append(opts, nats.UserCredentials(a.Credentials))
	}
	if a.NkeySeed != "" {
		kp, err := nkeys.FromSeed([]byte(a.NkeySeed))
		if err != nil {
			return nil, fmt.Errorf("hub key: %w", err)
		}
		public, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("hub key: %w", err)
		}
		opts = append(opts, nats.Nkey(public, kp.Sign))
	}
	if a.CAFile != "" {
		opts = append(opts, nats.RootCAs(a.CAFile))
	}
	nc, err := nats.Connect(strings.Join(a.URLs, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to the hub: %w", err)
	}
	return nc, nil
}

// DeliverPrefix is the subject prefix under which host's stream delivers
// to its mirror on the hub.
func DeliverPrefix(host string) string { return "aegis-deliver." + host }

// NewLeafKey makes a host's nkey (a NATS user key): the seed the host
// keeps and signs its link with, and the public key the hub's
// configuration names ([LeafUser]).
func NewLeafKey() (seed []byte, public string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", err
	}
	if seed, err = kp.Seed(); err != nil {
		return nil, "", err
	}
	public, err = kp.PublicKey()
	return seed, public, err
}

// LeafKeyPublic returns the public key of a host's link key seed.
func LeafKeyPublic(seed []byte) (string, error) {
	kp, err := nkeys.FromSeed(bytes.Clone(seed)) // Wipe zeroes what it was given
	if err != nil {
		return "", err
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

// LeafUser is the hub configuration of host's link: a user of the hub's
// JetStream account, known by its nkey, that may connect only as a leaf
// node and, as seen from the host, may
//   - receive only its own domain's JetStream API requests (the mirror's
//     consumer) and flow control, and the approval requests of the fleet
//     (see [FleetSubject]) addressed to the whole fleet or to itself;
//   - send only its stream's deliveries to its own mirror, the replies to
//     the mirror's requests, which the hub addresses per domain when its
//     configuration sets feature_flags { js_api_reply_v2: true }, and
//     answers to approvers: under its own name, and to the fleet-wide
//     question of who is there.
//
// So the host's credentials reach no JetStream API of the hub (not its
// own mirror's, not another host's), no other host's subjects, and cannot
// ask any host for a decision.
func LeafUser(host, nkey string) string {
	return fmt.Sprintf(`{
  nkey: %q
  allowed_connection_types: ["LEAFNODE"]
  permissions: {
    publish: { allow: [%q, %q, %q, %q] }
    subscribe: { allow: [%q, "$JS.FC.>", %q, %q] }
  }
}`, nkey, DeliverPrefix(host)+".>", "$JSC.R."+host+".>", fleetReplyPrefix+host+".*", fleetReplyPrefix+"*",
		"$JS."+host+".API.>", "aegis-fleet."+host+".>", FleetListSubject)
}

// FleetApproverUser is the hub configuration of a fleet approver: a user of
// the hub's JetStream account, known by its nkey, that may connect only
// as a client and may only send approval requests to the hosts' aegis
// processes ([FleetSubject], [FleetListSubject]) and read their answers.
// It reaches no stream and no JetStream API: an approver decides, it does
// not read or change the record.
func FleetApproverUser(nkey string) string {
	return fmt.Sprintf(`{
  nkey: %q
  allowed_connection_types: ["STANDARD"]
  permissions: {
    publish: { allow: [%q, %q] }
    subscribe: { allow: [%q, %q] }
  }
}`, nkey, FleetListSubject, "aegis-fleet.*.*", fleetReplyPrefix+"*", fleetReplyPrefix+"*.*")
}
