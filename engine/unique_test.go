package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/audit"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// claims are the jobs the claims of a unique key name, in order.
func (h *harness) claims(ns, key string) []string {
	h.t.Helper()
	var ids []string
	_, err := streams.ReadSubject(h.ctx, h.st.NC, streams.EventsStream, streams.UniqueSubject(ns, key), 1, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return err
		}
		if ev.Type != domain.EvUniqueClaimed {
			return fmt.Errorf("event %d on the key's subject is %s", seq, ev.Type)
		}
		ids = append(ids, ev.JobID)
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return ids
}

func (h *harness) submitted(req commands.SubmitRequest) engine.Submitted {
	h.t.Helper()
	res, err := h.st.Submit(h.ctx, &req)
	if err != nil {
		h.t.Fatalf("submit %+v: %v", req, err)
	}
	return res
}

// 100 submits of one key at once, from two stores (two processes' worth of
// connections), make exactly one job: one is created, 99 get it, each with
// a job.duplicate on its subject, and the key has one claim.
func TestUniqueConcurrentSubmitsMakeOneJob(t *testing.T) {
	h := newHarness(t)
	other := testkit.Store(t, testkit.Conn(t, h.srv), "other")
	const n = 100
	var wg sync.WaitGroup
	res := make([]engine.Submitted, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		st := h.st
		if i%2 == 1 {
			st = other
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i], errs[i] = st.Submit(h.ctx, &commands.SubmitRequest{Type: "u.none", UniqueKey: "invoice-7",
				Payload: commands.RawJSON(fmt.Sprintf(`{"n":%d}`, i))})
		}()
	}
	close(start)
	wg.Wait()
	created, id := 0, ""
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("submit %d: %v", i, errs[i])
		}
		if res[i].Created {
			created++
		}
		if id == "" {
			id = res[i].Job.ID
		}
		if res[i].Job.ID != id {
			t.Fatalf("submit %d got job %s, another got %s", i, res[i].Job.ID, id)
		}
	}
	if created != 1 || id != domain.UniqueID("default", "invoice-7", 0) {
		t.Fatalf("%d created, job %s", created, id)
	}
	if got := h.claims("default", "invoice-7"); len(got) != 1 || got[0] != id {
		t.Fatalf("claims %v", got)
	}
	evs := h.events(id)
	dups := 0
	for i, ev := range evs {
		switch {
		case i == 0 && ev.Type == domain.EvSubmitted:
		case i > 0 && ev.Type == domain.EvDuplicate && ev.To == "":
			dups++
		default:
			t.Fatalf("event %d of %s: %s", i, id, ev.Type)
		}
	}
	if dups != n-1 {
		t.Fatalf("%d job.duplicate events, want %d", dups, n-1)
	}
	// The record takes the duplicates (the Projector, or the next read
	// that decides), and the log and the records agree.
	testkit.WaitFor(t, 10*time.Second, func() error {
		cur, err := h.st.Current(h.ctx, id)
		if err != nil {
			return err
		}
		if cur.Job.Duplicates != n-1 || cur.Job.State != domain.StateQueued || cur.Job.Events != n {
			return fmt.Errorf("record: %d duplicates, %s, %d events", cur.Job.Duplicates, cur.Job.State, cur.Job.Events)
		}
		return nil
	})
	h.verify()
	// The duplicates are out of the job's hash chain (appended without a
	// decision): the chain of its decided events, one after them
	// included, verifies whole.
	if _, err := h.st.Cancel(h.ctx, id, "after the duplicates"); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.VerifyLog(h.ctx, h.st.JS, audit.Scope{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 0 {
		t.Fatalf("audit verify after %d duplicates: %+v", n-1, rep.Findings)
	}
}

// A key is held while its job's state is in its scope: active until it
// finishes, not-succeeded until it succeeds, any until it is purged.
func TestUniqueWhileScopes(t *testing.T) {
	h := newHarness(t)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Handlers: map[string]engine.Handler{
		"u.ok":   func(context.Context, *engine.Task) ([]byte, error) { return []byte(`1`), nil },
		"u.fail": func(context.Context, *engine.Task) ([]byte, error) { return nil, errors.New("no") },
	}})
	none := ptr(0)
	again := func(req commands.SubmitRequest, wantID string) {
		t.Helper()
		res := h.submitted(req)
		if res.Created || res.Job.ID != wantID {
			t.Fatalf("%s/%s: created %v job %s, want the existing %s", req.UniqueKey, req.UniqueWhile, res.Created, res.Job.ID, wantID)
		}
	}
	fresh := func(req commands.SubmitRequest, not string) string {
		t.Helper()
		res := h.submitted(req)
		if !res.Created || res.Job.ID == not {
			t.Fatalf("%s/%s: created %v job %s, want a new job", req.UniqueKey, req.UniqueWhile, res.Created, res.Job.ID)
		}
		return res.Job.ID
	}

	// active: a queued job holds, a cancelled one does not.
	active := commands.SubmitRequest{Type: "u.none", UniqueKey: "active"}
	a := fresh(active, "")
	again(active, a)
	if _, err := h.st.Cancel(h.ctx, a, "test"); err != nil {
		t.Fatal(err)
	}
	b := fresh(active, a)
	again(active, b)
	if got := h.claims("default", "active"); fmt.Sprint(got) != fmt.Sprint([]string{a, b}) {
		t.Fatalf("claims %v, want %v", got, []string{a, b})
	}

	// not-succeeded: a failed job holds, a succeeded one does not.
	failing := commands.SubmitRequest{Type: "u.fail", UniqueKey: "ns-fail", UniqueWhile: "not-succeeded", MaxRetries: none}
	f := fresh(failing, "")
	h.waitState(f, domain.StateFailed, 15*time.Second)
	again(failing, f)
	ok := commands.SubmitRequest{Type: "u.ok", UniqueKey: "ns-ok", UniqueWhile: "not-succeeded"}
	s := fresh(ok, "")
	h.waitState(s, domain.StateSucceeded, 15*time.Second)
	fresh(ok, s)

	// any: a succeeded job holds until it is purged.
	anyReq := commands.SubmitRequest{Type: "u.ok", UniqueFields: []string{"user"}, UniqueWhile: "any",
		Payload: commands.RawJSON(`{"user":"ada","n":1}`)}
	x := fresh(anyReq, "")
	h.waitState(x, domain.StateSucceeded, 15*time.Second)
	anyReq.Payload = commands.RawJSON(`{"n":2, "user":"ada"}`) // another payload, the same field
	again(anyReq, x)
	if n, err := h.st.Purge(h.ctx, x, "test"); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	y := fresh(anyReq, x)
	if j := h.waitState(y, domain.StateSucceeded, 15*time.Second); j.Spec.Unique == nil || j.Spec.Unique.Key != commands.UniqueKeyOf("default", "default", "u.ok", []string{"user"}, []byte(`{"user":"ada"}`)) {
		t.Fatalf("unique %+v", j.Spec.Unique)
	}
	// The job's history says what its key did.
	h.wantEvents(f, domain.EvSubmitted, domain.EvStarted, domain.EvFailed, domain.EvDuplicate)
	h.verify()
}

// unique_for ends the hold of a job still in its scope.
func TestUniqueForWindow(t *testing.T) {
	h := newHarness(t)
	req := commands.SubmitRequest{Type: "u.none", UniqueKey: "window", UniqueFor: dur(time.Second)}
	first := h.submitted(req)
	if !first.Created {
		t.Fatal("first not created")
	}
	if again := h.submitted(req); again.Created || again.Job.ID != first.Job.ID {
		t.Fatalf("in the window: %+v", again)
	}
	end := first.Job.CreatedAt.Add(time.Second)
	testkit.WaitFor(t, 5*time.Second, func() error {
		if time.Now().Before(end) {
			return fmt.Errorf("window open until %s", end)
		}
		return nil
	})
	next := h.submitted(req)
	if !next.Created || next.Job.ID == first.Job.ID {
		t.Fatalf("after the window: %+v", next)
	}
	if got := h.get(first.Job.ID); got.State != domain.StateQueued {
		t.Fatalf("the first job is %s", got.State)
	}
	// The key's second claim chains to its first.
	rep, err := audit.VerifyLog(h.ctx, h.st.JS, audit.Scope{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 0 {
		t.Fatalf("audit verify after a key claimed twice: %+v", rep.Findings)
	}
}

// A submitter that died between its job's first event and the key's claim
// leaves a job without a claim: the next submit of the key finds it by its
// derived id and claims the key for it; once it no longer holds, the key
// goes to a new job.
func TestUniqueClaimLeftByACrashIsMadeGood(t *testing.T) {
	h := newHarness(t)
	now := time.Now().UTC()
	req := commands.SubmitRequest{Type: "u.none", UniqueKey: "crash"}
	spec, err := req.Spec(now)
	if err != nil {
		t.Fatal(err)
	}
	id := domain.UniqueID("default", "crash", 0)
	ev, _ := commands.Submit(id, spec, false, now)
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.EventSubject(spec.Namespace, spec.Queue, spec.Type, id), ev, 0).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.claims("default", "crash"); len(got) != 0 {
		t.Fatalf("claims %v", got)
	}
	res := h.submitted(req)
	if res.Created || res.Job.ID != id {
		t.Fatalf("%+v, want the crashed submit's job %s", res, id)
	}
	if got := h.claims("default", "crash"); fmt.Sprint(got) != fmt.Sprint([]string{id}) {
		t.Fatalf("claims %v", got)
	}
	if _, err := h.st.Cancel(h.ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	next := h.submitted(req)
	if !next.Created || next.Job.ID == id {
		t.Fatalf("%+v", next)
	}
	if got := h.claims("default", "crash"); len(got) != 2 || got[1] != next.Job.ID {
		t.Fatalf("claims %v", got)
	}

	// The same left behind by a job that finished meanwhile: the submit
	// claims for it, looks again and creates a job.
	req.UniqueKey = "crash-2"
	spec, _ = req.Spec(now)
	id = domain.UniqueID("default", "crash-2", 0)
	ev, _ = commands.Submit(id, spec, false, now)
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.EventSubject(spec.Namespace, spec.Queue, spec.Type, id), ev, 0).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.Cancel(h.ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	next = h.submitted(req)
	if !next.Created || next.Job.ID == id {
		t.Fatalf("%+v", next)
	}
	if got := h.claims("default", "crash-2"); fmt.Sprint(got) != fmt.Sprint([]string{id, next.Job.ID}) {
		t.Fatalf("claims %v", got)
	}
	h.verify()
}

// A refused unique submit writes nothing; a submit without unique options
// reads and writes what it did before (no claim, no duplicate).
func TestUniqueRefusalWritesNothing(t *testing.T) {
	h := newHarness(t)
	last := h.lastSeq()
	for _, req := range []commands.SubmitRequest{
		{Type: "u.none", UniqueKey: "k", UniqueFields: []string{"a"}},
		{Type: "u.none", UniqueKey: "k", UniqueWhile: "sometimes"},
		{Type: "u.none", UniqueKey: "k", UniqueFor: dur(367 * 24 * time.Hour)},
		{Type: "u.none", UniqueFields: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}},
		{Type: "u.none", UniqueWhile: "any"},
	} {
		_, err := h.st.Submit(h.ctx, &req)
		var in *commands.InputError
		if !errors.As(err, &in) || in.Field == "" {
			t.Fatalf("%+v: %v", req, err)
		}
	}
	if h.lastSeq() != last {
		t.Fatalf("refusals wrote: %d -> %d", last, h.lastSeq())
	}
	plain := h.submitted(commands.SubmitRequest{Type: "u.none"})
	again := h.submitted(commands.SubmitRequest{Type: "u.none"})
	if !plain.Created || !again.Created || plain.Job.Spec.Unique != nil || h.lastSeq() != last+2 {
		t.Fatalf("plain submits: %+v %+v, %d events", plain, again, h.lastSeq()-last)
	}
}

// A batch of submits with unique keys: those of one key race as any others
// (one job), the others are made beside them, plain submits as before.
func TestUniqueInABatch(t *testing.T) {
	h := newHarness(t)
	var reqs []*commands.SubmitRequest
	for i := range 30 {
		key := "batch-shared"
		if i%3 == 1 {
			key = fmt.Sprintf("batch-own-%d", i)
		}
		r := &commands.SubmitRequest{Type: "u.none", UniqueKey: key}
		if i%3 == 2 {
			r = &commands.SubmitRequest{Type: "u.none"}
		}
		reqs = append(reqs, r)
	}
	reqs = append(reqs, &commands.SubmitRequest{Type: "u.none", UniqueKey: "k", UniqueWhile: "never"})
	out := h.st.SubmitBatch(h.ctx, reqs)
	shared, created := map[string]bool{}, 0
	for i, o := range out[:30] {
		if o.Err != nil {
			t.Fatalf("%d: %v", i, o.Err)
		}
		if o.Created {
			created++
		}
		if i%3 == 0 {
			shared[o.Job.ID] = true
		}
	}
	if len(shared) != 1 || created != 1+10+10 {
		t.Fatalf("shared key: %d jobs; %d created", len(shared), created)
	}
	if !isInputError(out[30].Err, "unique_while") {
		t.Fatalf("bad scope: %v", out[30].Err)
	}
}

func isInputError(err error, field string) bool {
	var in *commands.InputError
	return errors.As(err, &in) && in.Field == field
}

// replay --verify checks that no two jobs of a unique key held it at once:
// a job forged into the log beside the holder (not through a submit) is a
// difference; the jobs the submits made are not.
func TestVerifyFindsTwoHoldersOfAUniqueKey(t *testing.T) {
	h := newHarness(t)
	req := commands.SubmitRequest{Type: "u.none", UniqueKey: "forged"}
	first := h.submitted(req)
	if _, err := h.st.Cancel(h.ctx, first.Job.ID, "test"); err != nil {
		t.Fatal(err)
	}
	second := h.submitted(req) // legit: the first let the key go
	rep := h.verify()
	if rep.UniqueJobs != 2 {
		t.Fatalf("checked %d unique jobs", rep.UniqueJobs)
	}
	now := time.Now().UTC()
	spec, _ := req.Spec(now)
	id := domain.NewID()
	ev, _ := commands.Submit(id, spec, false, now)
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.EventSubject(spec.Namespace, spec.Queue, spec.Type, id), ev, 0).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.waitState(id, domain.StateQueued, 10*time.Second) // the Projector makes its record
	rep, err := projectionsVerify(h)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diffs) != 1 || rep.Diffs[0].ID != id || rep.UniqueJobs != 3 ||
		!strings.Contains(rep.Diffs[0].Reason, "while job "+second.Job.ID+" held its key") {
		t.Fatalf("diffs %+v, %d checked", rep.Diffs, rep.UniqueJobs)
	}
}
