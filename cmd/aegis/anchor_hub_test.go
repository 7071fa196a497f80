package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/events/hubtest"
	"github.com/aegis-dev/aegis/events/witness/witnesstest"
	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// The anchor log in a fleet, end to end: an aegis wrap linked to a real
// hub, whose policy's witnesses: names a real litewitness, records a few
// calls, and an aegis gateway whose config's witnesses: names the same
// witness extends the log; the hub's mirror then holds the anchor log with
// the rest of the stream (the witnessed record checkpoint as its anchor leaf, and the
// witness's cosignature). An auditor keeps the bundle of a line. Then the
// record is cut after that witnessed checkpoint, its sidecar re-signed,
// and the hub's mirror rewritten to match (its checkpoints past the cut
// dropped and a re-signed one put last), as one who holds both the host's
// key and the hub could: the machine's copies and the hub agree, and only
// the witnessed bundle still says Tampered.
func TestWitnessedCutIsTamperedWithSidecarAndHubMirrorRewritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub, a witness and aegis wrap")
	}
	t.Parallel() // it mostly waits (on processes, the hub's pulls): beside the others
	const host = "laptop-1"
	w := witnesstest.Start(t, "witness.example/w1")
	h := hubtest.New(t, 3)
	ctx := context.Background()
	nc, js := h.JetStream(ctx)
	defer nc.Close()
	if _, err := events.Enroll(ctx, events.HubAdmin{URLs: h.ClientURLs()}, host, events.EnrollOptions{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	// witnesses: in the policy, as a deployment would name them.
	l := newLive(t, "version: 1\nwitnesses: |\n  "+w.PolicyLine("w1")+"  quorum w1\n")
	pub := l.publicKey()
	pubKey, _ := hex.DecodeString(pub)
	origin, vkey, err := projector.AnchorVerifierKey(pubKey)
	if err != nil {
		t.Fatal(err)
	}
	w.AddLog(t, origin, vkey)
	pol := filepath.Join(l.dir, "witnesses") // the auditor's copy of the policy
	if err := os.WriteFile(pol, []byte(w.PolicyLine("w1")+"quorum w1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hubURLs := strings.Join(h.ClientURLs(), ",")
	wp := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state,
		"--policy", l.policy, "--checkpoint-lines", "2", "--witness-interval", "100ms",
		"--hub", strings.Join(h.LeafURLs(), ","), "--host", host, "--", filepath.Join(l.bin, "aegis-example-server")))
	wp.initialize()
	for i := range 3 {
		wp.call(i+1, "tools/call", `{"name":"echo","arguments":{"message":"x"}}`)
	}
	w.WaitSize(t, origin, 1)
	wp.finish()
	// A gateway on the same state directory, its witnesses named by its
	// config's witnesses:, extends the log and has it cosigned too.
	before := w.Size(t, origin)
	gwConfig := filepath.Join(l.dir, "aegis.yaml")
	if err := os.WriteFile(gwConfig, []byte("version: 1\nservers:\n  example:\n    command: "+filepath.Join(l.bin, "aegis-example-server")+
		"\nprofiles:\n  p:\n    allow: [example.echo]\nactivation:\n  default_profile: p\nwitnesses: |\n  "+w.PolicyLine("w1")+"  quorum w1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := l.start(exec.Command(filepath.Join(l.bin, "aegis"), "gateway", "--config", gwConfig, "--audit", filepath.Join(l.dir, "gateway.aarl"),
		"--signing-key", l.key, "--state-dir", l.state, "--checkpoint-lines", "2", "--witness-interval", "100ms"))
	gw.initialize()
	if a := gw.call(1, "tools/call", `{"name":"example__echo","arguments":{"message":"x"}}`); !strings.Contains(a, `"x"`) {
		t.Fatalf("echo through the gateway: %s", a)
	}
	w.WaitSize(t, origin, before+1)
	gw.finish()
	noKey := filepath.Join(l.dir, "no.nkey") // the hub takes leaves without one
	if err := os.WriteFile(noKey, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	linkUntilMirrored(t, l.state, host, noKey, h)

	out, stderr, code := l.aegisStdout("prove", "anchor", "--line", "2", "--state-dir", l.state, l.audit)
	if code != 0 {
		t.Fatalf("prove anchor: exit %d\n%s%s", code, out, stderr)
	}
	bundle := filepath.Join(l.dir, "line2.bundle")
	if err := os.WriteFile(bundle, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	var b schemas.AnchorBundle
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatal(err)
	}
	cp, err := schemas.ParseCheckpoint(schemas.NoteText([]byte(b.RecordCheckpoint)))
	if err != nil {
		t.Fatal(err)
	}

	// Cut the record after the witnessed checkpoint and re-sign its
	// sidecar, as the host's owner could.
	cut := cp.Size - 1
	rec := readFile(t, l.audit)
	if err := os.WriteFile(l.audit, []byte(strings.Join(strings.SplitAfter(string(rec), "\n")[:cut], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := projector.LoadKeyFile(l.key)
	if err != nil {
		t.Fatal(err)
	}
	forged, _, err := projector.CheckpointFile(ctx, key, l.audit, projector.CheckpointOrigin(key, l.audit))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.audit+projector.CheckpointsSuffix, append(forged, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	// (Indeterminate: the record ends without a close line.)
	if out, code := l.aegis("verify", "--key", pub, l.audit); code == 1 {
		t.Fatalf("the cut record with its re-signed sidecar should pass the machine's own checks (else this test proves nothing): exit %d\n%s", code, out)
	}
	if out, code := l.aegis("verify", "--key", pub, "--hub", hubURLs, "--host", host, l.audit); code != 1 || !strings.Contains(out, "Tampered") {
		t.Fatalf("the cut record against the hub's mirror as the host fed it: exit %d, want Tampered (1)\n%s", code, out)
	}

	// The hub's mirror: it holds the anchor log (the bundle's record
	// checkpoint as leaf b.AnchorIndex, and the witness's cosignature of
	// the bundle's anchor checkpoint). Rewritten to agree with the cut
	// record, it is read back as a stream of the mirror's name.
	mirror, err := js.Stream(ctx, events.MirrorName(host))
	if err != nil {
		t.Fatal(err)
	}
	info, err := mirror.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var kept []*nats.Msg
	var last *nats.Msg
	leaf, cosigned := false, false
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := mirror.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		hdr := nats.Header{}
		for k, v := range m.Header {
			if !strings.HasPrefix(k, "Nats-") {
				hdr[k] = v
			}
		}
		msg := &nats.Msg{Subject: m.Subject, Header: hdr, Data: m.Data}
		switch {
		case strings.HasSuffix(m.Subject, "."+string(schemas.KindRecordCheckpoint)):
			e, err := schemas.DecodeEvent(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			var c projector.RecordCheckpoint
			if err := json.Unmarshal(e.Payload, &c); err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(c.Note) == strings.TrimSpace(b.RecordCheckpoint) && c.Anchor != nil && c.Anchor.Index == b.AnchorIndex {
				leaf = true
			}
			if n, err := schemas.ParseCheckpoint(schemas.NoteText([]byte(c.Note))); err == nil && n.Size > cut {
				last = msg // dropped: it covers lines that were cut
				continue
			}
		case strings.HasSuffix(m.Subject, "."+string(schemas.KindAnchorCosigned)):
			e, err := schemas.DecodeEvent(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			var c projector.AnchorCosigned
			if err := json.Unmarshal(e.Payload, &c); err != nil {
				t.Fatal(err)
			}
			if c.Witness == w.Name && strings.TrimSpace(c.Note) == strings.TrimSpace(b.AnchorCheckpoint) {
				cosigned = true
			}
		}
		kept = append(kept, msg)
	}
	if !leaf || !cosigned || last == nil {
		t.Fatalf("the hub's mirror of %d messages holds the bundle's record checkpoint as an anchor leaf: %v; the witness's cosignature of its anchor checkpoint: %v; a checkpoint past the cut: %v",
			info.State.LastSeq, leaf, cosigned, last != nil)
	}
	e, err := schemas.DecodeEvent(last.Data)
	if err != nil {
		t.Fatal(err)
	}
	var c projector.RecordCheckpoint
	if err := json.Unmarshal(e.Payload, &c); err != nil {
		t.Fatal(err)
	}
	c.Note, c.Anchor = strings.TrimSuffix(string(forged), "\n"), nil
	if e.Payload, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	if last.Data, err = e.Encode(); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, last)
	if err := js.DeleteStream(ctx, events.MirrorName(host)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: events.MirrorName(host), Subjects: []string{"aegis.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for _, m := range kept {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if out, code := l.aegis("verify", "--key", pub, "--hub", hubURLs, "--host", host, l.audit); code == 1 {
		t.Fatalf("the cut record against the rewritten mirror should pass (else this test proves nothing): exit %d\n%s", code, out)
	}
	out, code = l.aegis("verify", "--witness-policy", pol, "--key", pub, "--bundle", bundle, "--hub", hubURLs, "--host", host, l.audit)
	if code != 1 || !strings.Contains(out, "Tampered") {
		t.Fatalf("the cut record against the witnessed bundle, sidecar and mirror rewritten: exit %d, want Tampered (1)\n%s", code, out)
	}
	t.Logf("%s", out)
}
