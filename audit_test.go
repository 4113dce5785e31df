package jetflow_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// AuditVerify and AuditPublicKey from a Client without a token (the log
// itself), one with an admin token and one with a reader's token of
// namespace acme (the engine's command service), against an engine that
// signs a checkpoint every 50 ms when anything was appended.
func TestClientAudit(t *testing.T) {
	ctx := testkit.Ctx(t)
	pub, d, k, ra := auditEnv(t)
	a, err := d.Submit(ctx, "audit.t", nil, jetflow.Namespace("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Cancel(ctx, a.ID, "audit"); err != nil {
		t.Fatal(err)
	}
	b, err := d.Submit(ctx, "audit.t", nil, jetflow.Namespace("other"))
	if err != nil {
		t.Fatal(err)
	}
	var whole *jetflow.AuditReport
	testkit.WaitFor(t, 10*time.Second, func() error {
		if whole, err = d.AuditVerify(ctx, jetflow.ReplayScope{}, pub); err != nil {
			return err
		}
		if whole.Checkpoints == 0 || whole.Uncovered != 0 {
			return fmt.Errorf("not covered yet: %+v", whole)
		}
		return nil
	})
	if !whole.OK() || !whole.KeyPinned || whole.Key != pub || whole.Findings == nil {
		t.Fatalf("the whole log: %+v", whole)
	}
	if got, err := k.AuditVerify(ctx, jetflow.ReplayScope{}, pub); err != nil || cmp.Diff(whole, got) != "" {
		t.Errorf("the admin's token client: %v %s", err, cmp.Diff(whole, got))
	}
	// acme's part and a's events: the same from each client.
	for name, c := range map[string]*jetflow.Client{"direct": d, "admin": k, "reader of acme": ra} {
		for _, s := range []jetflow.ReplayScope{{Namespace: "acme"}, {Job: a.ID}, {Job: a.ID, Namespace: "acme", Type: "audit.t", Queue: "default"}} {
			rep, err := c.AuditVerify(ctx, s, "")
			if err != nil || !rep.OK() || rep.Events != 2+rep.Checkpoints || rep.Subjects != 2 || rep.Checkpoints != whole.Checkpoints ||
				rep.KeyPinned || rep.Key != pub {
				t.Errorf("%s verifies %+v: %v %+v", name, s, err, rep)
			}
		}
	}
	if rep, err := ra.AuditVerify(ctx, jetflow.ReplayScope{}, pub); err != nil || !rep.OK() || rep.Events != 2+rep.Checkpoints {
		t.Errorf("the reader of acme's whole log is acme's: %v %+v", err, rep)
	}
	// Nothing stored in the range.
	if rep, err := d.AuditVerify(ctx, jetflow.ReplayScope{Since: time.Now().Add(time.Hour)}, pub); err != nil || !rep.OK() || rep.Events != 0 {
		t.Errorf("since an hour from now: %v %+v", err, rep)
	}
	// Another namespace, or its job, to the reader of acme.
	if _, err := ra.AuditVerify(ctx, jetflow.ReplayScope{Namespace: "other"}, ""); !errors.Is(err, jetflow.ErrDenied) {
		t.Errorf("the reader of acme verifies other: %v", err)
	}
	if _, err := ra.AuditVerify(ctx, jetflow.ReplayScope{Job: b.ID}, ""); !errors.Is(err, jetflow.ErrNotFound) {
		t.Errorf("the reader of acme verifies other's job: %v", err)
	}
	// Bad input: the same problem from each client.
	for _, bad := range []struct {
		scope  jetflow.ReplayScope
		pubkey string
		field  string
	}{
		{jetflow.ReplayScope{Queue: "a b"}, "", "queue"},
		{jetflow.ReplayScope{Job: "a.b"}, "", "job"},
		{jetflow.ReplayScope{Since: time.Now(), Until: time.Now().Add(-time.Hour)}, "", "until"},
		{jetflow.ReplayScope{}, "nope", "pubkey"},
	} {
		for name, c := range map[string]*jetflow.Client{"direct": d, "admin": k, "reader of acme": ra} {
			_, err := c.AuditVerify(ctx, bad.scope, bad.pubkey)
			if p := jetflow.ProblemOf(err); p == nil || p.Type != "invalid-input" || p.Field != bad.field || !errors.Is(err, jetflow.ErrInvalidInput) {
				t.Errorf("%s verifies %+v with %q: %v, want invalid-input %s", name, bad.scope, bad.pubkey, err, bad.field)
			}
		}
	}

	// The key: the engine's from its command service; the newest
	// checkpoint's from the log.
	last, err := testkit.StoreOf(t, d).Events.GetLastMsgForSubject(ctx, streams.CheckpointSubject)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*jetflow.Client{"admin": k, "reader of acme": ra} {
		if key, err := c.AuditPublicKey(ctx); err != nil || *key != (jetflow.AuditKey{PublicKey: pub, Source: jetflow.AuditKeyOfEngine}) {
			t.Errorf("%s's key: %v %+v", name, err, key)
		}
	}
	if key, err := d.AuditPublicKey(ctx); err != nil || *key != (jetflow.AuditKey{PublicKey: pub, Source: jetflow.AuditKeyOfCheckpoint, Checkpoint: last.Sequence}) {
		t.Errorf("the direct client's key: %v %+v, want the checkpoint at %d", err, key, last.Sequence)
	}

	// An event written by hand on b's subject: named, to the admin and
	// not to acme's reader.
	forged, err := streams.EncodeEvent(&domain.Event{Type: domain.EvCancelled, JobID: b.ID, Time: time.Now(), Actor: "engine"})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := testkit.StoreOf(t, d).JS.PublishMsg(ctx, &nats.Msg{Subject: streams.EventSubject("other", "default", "audit.t", b.ID), Data: forged})
	if err != nil {
		t.Fatal(err)
	}
	want := []jetflow.AuditFinding{{Kind: jetflow.AuditForged, Subject: streams.EventSubject("other", "default", "audit.t", b.ID), Job: b.ID, Seq: ack.Sequence,
		What: "job.cancelled has no chain hash: not written by an engine"}}
	for name, c := range map[string]*jetflow.Client{"direct": d, "admin": k} {
		rep, err := c.AuditVerify(ctx, jetflow.ReplayScope{Namespace: "other"}, pub)
		if err != nil || cmp.Diff(want, rep.Findings) != "" || rep.OK() {
			t.Errorf("%s verifies other after the forgery: %v %+v", name, err, rep)
		}
	}
	if rep, err := ra.AuditVerify(ctx, jetflow.ReplayScope{}, pub); err != nil || !rep.OK() {
		t.Errorf("the reader of acme after the forgery: %v %+v", err, rep)
	}
}

// auditEnv starts an engine that signs a checkpoint every 50 ms when
// anything was appended, and returns its key, a Client without a token,
// one with an admin token and one with a reader's token of namespace acme.
func auditEnv(t *testing.T) (pub string, direct, admin, acmeReader *jetflow.Client) {
	t.Helper()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	eng, err := jetflow.NewEngineE(testkit.Client(t, testkit.Conn(t, srv), "engine"), jetflow.EngineConfig{Auth: true,
		AuditKeyDir: t.TempDir(), CheckpointInterval: 50 * time.Millisecond, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	d := testkit.Client(t, testkit.Conn(t, srv), "direct")
	token := func(ns string, role jetflow.Role) *jetflow.Client {
		tok, err := d.CreateToken(ctx, jetflow.TokenSpec{Name: "t-" + ns + "-" + string(role), Namespace: ns, Role: role})
		if err != nil {
			t.Fatal(err)
		}
		c, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Token: tok.Token})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return eng.AuditPublicKey(), d, token("*", jetflow.RoleAdmin), token("acme", jetflow.RoleReader)
}

// AuditExport from a Client without a token and one with an admin token
// writes the same bytes (over the command service: several chunks, each
// acknowledged), which verify offline against the key; a reader of acme
// exports acme's part only and is refused another namespace's; bad input
// is the same problem from each client.
func TestClientAuditExport(t *testing.T) {
	ctx := testkit.Ctx(t)
	pub, d, k, ra := auditEnv(t)
	var reqs []*jetflow.SubmitRequest
	for i := range 1500 {
		ns := "acme"
		if i%3 == 0 {
			ns = "other"
		}
		r, err := jetflow.NewRequest("audit.t", map[string]int{"i": i}, jetflow.Namespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	jobs, errs := d.SubmitMany(ctx, reqs)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		rep, err := d.AuditVerify(ctx, jetflow.ReplayScope{}, pub)
		if err != nil || rep.Uncovered != 0 {
			return fmt.Errorf("not covered yet: %v %+v", err, rep)
		}
		return nil
	})
	export := func(c *jetflow.Client, s jetflow.AuditExportScope) (*bytes.Buffer, *jetflow.AuditExportStats) {
		t.Helper()
		var b bytes.Buffer
		st, err := c.AuditExport(ctx, s, &b)
		if err != nil {
			t.Fatal(err)
		}
		if st.Bytes != int64(b.Len()) {
			t.Fatalf("%d bytes said, %d written", st.Bytes, b.Len())
		}
		return &b, st
	}
	whole, st := export(d, jetflow.AuditExportScope{})
	// The submits and the two tokens' creations.
	if st.Events != 1502 || st.Checkpoints == 0 || st.Uncovered != 0 || whole.Len() < 2*256<<10 {
		t.Fatalf("the whole log: %+v, %d bytes", st, whole.Len())
	}
	byToken, st2 := export(k, jetflow.AuditExportScope{})
	if !bytes.Equal(whole.Bytes(), byToken.Bytes()) || *st2 != *st {
		t.Fatalf("the admin's token client exported %d bytes (%+v), the direct one %d (%+v)", byToken.Len(), st2, whole.Len(), st)
	}
	if rep, err := engine.VerifyAuditExport(byToken, pub); err != nil || !rep.OK() || rep.Events != 1502+rep.Checkpoints {
		t.Fatalf("the export verifies: %v %+v", err, rep)
	}
	acme, st3 := export(ra, jetflow.AuditExportScope{})
	if st3.Events != 1000 || st3.Proofs != 1000 || bytes.Contains(acme.Bytes(), []byte(jobs[0].ID)) || !bytes.Contains(acme.Bytes(), []byte(jobs[1].ID)) {
		t.Fatalf("the reader of acme's export: %+v", st3)
	}
	if rep, err := engine.VerifyAuditExport(acme, pub); err != nil || !rep.OK() {
		t.Fatalf("acme's export verifies: %v %+v", err, rep)
	}
	if _, err := ra.AuditExport(ctx, jetflow.AuditExportScope{Namespace: "other"}, io.Discard); !errors.Is(err, jetflow.ErrDenied) {
		t.Errorf("the reader of acme exports other: %v", err)
	}
	for name, c := range map[string]*jetflow.Client{"direct": d, "admin": k} {
		_, err := c.AuditExport(ctx, jetflow.AuditExportScope{Since: time.Now(), Until: time.Now().Add(-time.Hour)}, io.Discard)
		if p := jetflow.ProblemOf(err); p == nil || p.Type != "invalid-input" || p.Field != "until" {
			t.Errorf("%s exports until before since: %v", name, err)
		}
		_, err = c.AuditExport(ctx, jetflow.AuditExportScope{Namespace: "a b"}, io.Discard)
		if p := jetflow.ProblemOf(err); p == nil || p.Type != "invalid-input" || p.Field != "namespace" {
			t.Errorf("%s exports namespace %q: %v", name, "a b", err)
		}
	}
}

// A verification with more findings than fit a command's reply (1 MiB):
// the token client's report holds the first ones and counts the rest, so
// that the two together are the direct client's findings, and it is not
// OK.
func TestClientAuditFindingsCut(t *testing.T) {
	ctx := testkit.Ctx(t)
	pub, d, k, _ := auditEnv(t)
	j, err := d.Submit(ctx, "audit.t", nil, jetflow.Namespace("acme"), jetflow.Queue("nobody"))
	if err != nil {
		t.Fatal(err)
	}
	// Events written by hand, without the chain: each one a finding.
	js := testkit.StoreOf(t, d).JS
	subject := streams.EventSubject("acme", "nobody", "audit.t", j.ID)
	var acks []jetstream.PubAckFuture
	for i := range 8000 {
		data, err := streams.EncodeEvent(&domain.Event{Type: domain.EvProgress, JobID: j.ID, Time: time.Now(), Actor: "engine", Message: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		f, err := js.PublishAsync(subject, data)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, f)
		if i%500 == 499 { // at most 500 in flight: a loaded machine stalls more
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		}
	}
	whole, err := d.AuditVerify(ctx, jetflow.ReplayScope{Job: j.ID}, pub)
	if err != nil || whole.OK() || len(whole.Findings) < 8000 || whole.FindingsNotShown != 0 {
		t.Fatalf("the direct client: %v, %d findings, %d not shown", err, len(whole.Findings), whole.FindingsNotShown)
	}
	cut, err := k.AuditVerify(ctx, jetflow.ReplayScope{Job: j.ID}, pub)
	if err != nil || cut.OK() || cut.FindingsNotShown == 0 || len(cut.Findings)+cut.FindingsNotShown != len(whole.Findings) ||
		cmp.Diff(whole.Findings[:len(cut.Findings)], cut.Findings) != "" {
		t.Fatalf("the token client: %v, %d findings shown, %d not shown, the direct client %d", err, len(cut.Findings), cut.FindingsNotShown, len(whole.Findings))
	}
}

// A Client without a name or a token, connected as a NATS user, signs its
// events "nats:<user>@<host>-<pid>" (the actor the audit names).
func TestClientDefaultActor(t *testing.T) {
	ctx := testkit.Ctx(t)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "auditor", Password: "s3cret"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	host, _ := os.Hostname()
	want := fmt.Sprintf("nats:auditor@%s-%d", host, os.Getpid())
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("auditor", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cl, err := jetflow.NewClient(ctx, nc, jetflow.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := cl.Submit(ctx, "audit.t", nil, jetflow.Queue("nobody"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Cancel(ctx, j.ID, "actor"); err != nil {
		t.Fatal(err)
	}
	evs, err := cl.Events(ctx, j.ID)
	if err != nil || len(evs) != 2 {
		t.Fatalf("events: %v %d", err, len(evs))
	}
	for _, ev := range evs {
		if ev.Actor != want {
			t.Errorf("%s by %q, want %q", ev.Type, ev.Actor, want)
		}
	}
}
