package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
)

// failingWorker runs op.fail (fails for good with code BROKEN), op.ok and
// a fan-out of 6 batches of which pieces 2 and 5 fail for good.
func (e *env) failingWorker() {
	e.t.Helper()
	cl, err := jetflow.NewClient(e.ctx, testkit.Conn(e.t, e.srv), jetflow.ClientOptions{Name: "sdk", Logger: testkit.Logger(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	w := jetflow.NewWorker(cl, jetflow.WorkerConfig{Logger: testkit.Logger(e.t), ShutdownGrace: time.Second})
	w.Handle("op.fail", jetflow.HandlerFunc(func(context.Context, *jetflow.RawJob) (json.RawMessage, error) {
		return nil, jetflow.Permanent(jetflow.WithCode("BROKEN", errors.New("the printer is on fire")))
	}))
	w.Handle("op.ok", jetflow.HandlerFunc(func(_ context.Context, j *jetflow.RawJob) (json.RawMessage, error) { return j.Payload, nil }))
	w.Handle("op.fanout", jetflow.HandlerFunc(func(context.Context, *jetflow.RawJob) (json.RawMessage, error) {
		none := 0
		return nil, jetflow.FanOut(jetflow.FanOutSpec{BatchType: "op.batch", Batches: []any{1, 2, 3, 4, 5, 6}, BatchMaxRetries: &none})
	}))
	jetflow.RegisterBatch(w, "op.batch", func(_ context.Context, b *jetflow.Batch[int]) error {
		if b.Payload == 2 || b.Payload == 5 {
			return jetflow.Permanent(fmt.Errorf("batch %d is broken", b.Payload))
		}
		return nil
	})
	if err := w.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { w.Stop(context.Background()) })
}

// TestBulkRetryFailedPieces: a bulk retry with failed_pieces retries each
// fan-out selected as a retry of its failed pieces (only batches 2 and 5
// run again, the others are carried over) and skips a failed job that did
// not fan out.
func TestBulkRetryFailedPieces(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fan := e.failedFanOutAndJob()
	var op bulkOp
	e.do("POST", "/api/v1/jobs/bulk", `{"action":"retry","query":"state=failed","failed_pieces":true}`).want(t, http.StatusAccepted).json(t, &op)
	if op = e.waitBulk(op); op.State != "done" || !op.FailedPieces || op.Matched != 2 || op.Changed != 1 || op.Skipped != 1 || op.Failed != 0 {
		t.Fatalf("bulk %+v", op)
	}
	again := e.failedPiecesRetryOf(fan)
	var ps struct {
		Pieces []struct {
			Piece       int    `json:"piece"`
			CarriedFrom string `json:"carried_from"`
		}
	}
	e.do("GET", "/api/v1/jobs/"+again+"/pieces?limit=100", nil).want(t, 200).json(t, &ps)
	carried := 0
	for _, p := range ps.Pieces {
		if p.CarriedFrom == fan {
			carried++
		} else if p.Piece != 2 && p.Piece != 5 {
			t.Fatalf("piece %d ran again", p.Piece)
		}
	}
	if carried != 4 {
		t.Fatalf("%d pieces carried over, want 4: %+v", carried, ps.Pieces)
	}
}

// failedFanOutAndJob runs the failing worker, submits an op.fanout (its
// batches 2 and 5 fail) and an op.fail, waits until both failed, and
// returns the fan-out's id.
func (e *env) failedFanOutAndJob() string {
	e.t.Helper()
	e.failingWorker()
	fan := e.submit(`{"type":"op.fanout"}`)
	plain := e.submit(`{"type":"op.fail"}`)
	e.waitState(fan.ID, domain.StateFailed)
	e.waitState(plain.ID, domain.StateFailed)
	return fan.ID
}

// failedPiecesRetryOf returns the one retry of fan-out fan (failing the
// test unless there is exactly one), once it failed: a retry of its
// failed pieces only, 4 batches carried over as succeeded, the 2 broken
// ones failed again.
func (e *env) failedPiecesRetryOf(fan string) string {
	e.t.Helper()
	var l jobList
	e.do("GET", "/api/v1/jobs?type=op.fanout&limit=100", nil).want(e.t, 200).json(e.t, &l)
	var retries []string
	for _, j := range l.Jobs {
		if j.RetryOf == fan {
			retries = append(retries, j.ID)
		}
	}
	if len(retries) != 1 {
		e.t.Fatalf("%d retries of %s among %d fan-outs", len(retries), fan, len(l.Jobs))
	}
	v := e.waitState(retries[0], domain.StateFailed)
	if !v.FailedPieces || v.Fanout == nil || v.Fanout.Succeeded != 4 || v.Fanout.Failed != 2 {
		e.t.Fatalf("the retry %s: failed_pieces %v, %+v", retries[0], v.FailedPieces, v.Fanout)
	}
	return retries[0]
}

// waitBulk follows a bulk operation until it ends.
func (e *env) waitBulk(op bulkOp) bulkOp {
	e.t.Helper()
	testkit.WaitFor(e.t, 20*time.Second, func() error {
		e.do("GET", "/api/v1/bulk/"+op.ID, nil).want(e.t, 200).json(e.t, &op)
		if op.State == "running" {
			return fmt.Errorf("running: %+v", op)
		}
		return nil
	})
	return op
}

// TestBulkActions: a dry run counts what a filter selects; a bulk retry
// retries each failed job once (a new job with retry_of; a second retry of
// the same filter skips them), a bulk cancel cancels each with the
// operation in its reason, a bulk purge purges; progress is told by GET
// /bulk/{id}; bad requests are refused and write nothing.
func TestBulkActions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.failingWorker()
	var failed []string
	for i := 0; i < 7; i++ {
		failed = append(failed, e.submit(`{"type":"op.fail","tags":["batch7"]}`).ID)
	}
	e.submit(`{"type":"op.fail","queue":"elsewhere"}`) // not selected: another queue, nobody serves it
	for _, id := range failed {
		e.waitState(id, domain.StateFailed)
	}
	var dry bulkOp
	e.do("POST", "/api/v1/jobs/bulk", `{"action":"retry","query":"state=failed&tag=batch7","dry_run":true}`).want(t, 200).json(t, &dry)
	if dry.Matched != 7 || dry.ID != "" || !dry.DryRun {
		t.Fatalf("dry run %+v", dry)
	}
	before := e.eventCount()
	var op bulkOp
	r := e.do("POST", "/api/v1/jobs/bulk", `{"action":"retry","query":"state=failed&tag=batch7"}`).want(t, http.StatusAccepted)
	r.json(t, &op)
	if op.ID == "" || op.Matched != 7 || r.header.Get("Location") != "/api/v1/bulk/"+op.ID {
		t.Fatalf("accepted %+v %v", op, r.header)
	}
	op = e.waitBulk(op)
	if op.State != "done" || op.Done != 7 || op.Changed != 7 || op.Skipped != 0 || op.Failed != 0 || op.By != "gateway" {
		t.Fatalf("retry %+v", op)
	}
	var retries jobList
	e.do("GET", "/api/v1/jobs?type=op.fail&limit=100", nil).want(t, 200).json(t, &retries)
	n := 0
	for _, j := range retries.Jobs {
		if j.RetryOf != "" {
			n++
			if ev := e.eventTypes(j.ID); ev[0] != domain.EvSubmitted {
				t.Fatalf("retry %s events %v", j.ID, ev)
			}
		}
	}
	if n != 7 {
		t.Fatalf("%d retries", n)
	}
	for _, j := range retries.Jobs {
		if j.RetryOf != "" {
			e.waitState(j.ID, domain.StateFailed) // op.fail fails every time
		}
	}
	if got := e.eventCount() - before; got < 7 {
		t.Fatalf("%d events for 7 retries", got)
	}
	// Again: the first 7 were retried already; their retries were not.
	var again bulkOp
	e.do("POST", "/api/v1/jobs/bulk", `{"action":"retry","query":"state=failed&tag=batch7"}`).want(t, http.StatusAccepted).json(t, &again)
	if again = e.waitBulk(again); again.Matched != 14 || again.Skipped != 7 || again.Changed != 7 {
		t.Fatalf("second retry %+v", again)
	}

	// Cancel: the queued jobs of a queue nobody serves.
	var queued []string
	for i := 0; i < 3; i++ {
		queued = append(queued, e.submit(`{"type":"op.none","queue":"idle"}`).ID)
	}
	var cancel bulkOp
	e.do("POST", "/api/v1/jobs/bulk", `{"action":"cancel","query":"queue=idle","reason":"clean up"}`).want(t, http.StatusAccepted).json(t, &cancel)
	if cancel = e.waitBulk(cancel); cancel.Changed != 3 {
		t.Fatalf("cancel %+v", cancel)
	}
	for _, id := range queued {
		var out struct{ Events []*projections.EventView }
		e.do("GET", "/api/v1/jobs/"+id+"/events", nil).want(t, 200).json(t, &out)
		last := out.Events[len(out.Events)-1]
		if last.Type != domain.EvCancelled || last.Actor != "gateway" || !strings.Contains(last.Message, "clean up ("+cancel.ID+" by gateway)") {
			t.Fatalf("job %s: last event %+v", id, last)
		}
	}
	// Purge the cancelled ones.
	var purge bulkOp
	e.do("POST", "/api/v1/jobs/bulk", `{"action":"purge","query":"queue=idle&state=cancelled"}`).want(t, http.StatusAccepted).json(t, &purge)
	if purge = e.waitBulk(purge); purge.Changed != 3 {
		t.Fatalf("purge %+v", purge)
	}
	for _, id := range queued {
		e.do("GET", "/api/v1/jobs/"+id, nil).problem(t, http.StatusGone, "gone")
	}

	before = e.eventCount()
	for _, c := range []struct{ body, field string }{
		{`{"action":"delete","query":""}`, "action"},
		{`{"action":"retry","query":"state=asleep"}`, "state"},
		{`{"action":"retry","query":"limit=5"}`, "query"},
		{`{"action":"retry","query":"payload=nothing"}`, "payload"},
		{`{"action":"cancel","query":"","reason":"` + strings.Repeat("x", commands.MaxReasonBytes+1) + `"}`, "reason"},
		{`{"action":"cancel","query":"","failed_pieces":true}`, "failed_pieces"},
	} {
		if p := e.do("POST", "/api/v1/jobs/bulk", c.body).problem(t, 400, "invalid-input"); p.Field != c.field {
			t.Fatalf("%s: %+v", c.body, p)
		}
	}
	e.do("GET", "/api/v1/bulk/bk-none", nil).problem(t, 404, "not-found")
	if e.eventCount() != before {
		t.Fatal("refused bulk requests wrote events")
	}
}

// Under access control a bulk action is its role's (purge: an admin's),
// in the token's namespace only; the events name the token.
func TestBulkAccess(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	var mine, theirs struct{ ID string }
	e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "ba.x"}).want(t, 201).json(t, &mine)
	e.as("prodB", "POST", "/api/v1/jobs", map[string]any{"type": "ba.x"}).want(t, 201).json(t, &theirs)
	e.as("readA", "POST", "/api/v1/jobs/bulk", map[string]any{"action": "cancel", "query": "", "dry_run": true}).problem(t, 403, "forbidden")
	e.as("prodA", "POST", "/api/v1/jobs/bulk", map[string]any{"action": "purge", "query": "", "dry_run": true}).problem(t, 403, "forbidden")
	e.as("prodA", "POST", "/api/v1/jobs/bulk", map[string]any{"action": "cancel", "query": "namespace=other", "dry_run": true}).problem(t, 403, "forbidden")
	var op bulkOp
	e.as("prodA", "POST", "/api/v1/jobs/bulk", map[string]any{"action": "cancel", "query": "type=ba.x"}).want(t, 202).json(t, &op)
	if op.Matched != 1 || op.By != "token:prod-a/"+e.ids["prodA"] {
		t.Fatalf("op %+v", op)
	}
	e.as("prodB", "GET", "/api/v1/bulk/"+op.ID, nil).problem(t, 404, "not-found")
	testkit.WaitFor(t, 10*time.Second, func() error {
		e.as("prodA", "GET", "/api/v1/bulk/"+op.ID, nil).want(t, 200).json(t, &op)
		if op.State != "done" {
			return fmt.Errorf("%+v", op)
		}
		return nil
	})
	var a, b projections.JobView
	e.as("admin", "GET", "/api/v1/jobs/"+mine.ID, nil).want(t, 200).json(t, &a)
	e.as("admin", "GET", "/api/v1/jobs/"+theirs.ID, nil).want(t, 200).json(t, &b)
	if a.State != domain.StateCancelled || b.State != domain.StateQueued {
		t.Fatalf("mine %s, theirs %s", a.State, b.State)
	}
	var out struct{ Events []*projections.EventView }
	e.as("admin", "GET", "/api/v1/jobs/"+mine.ID+"/events", nil).want(t, 200).json(t, &out)
	if last := out.Events[len(out.Events)-1]; last.Actor != "token:prod-a/"+e.ids["prodA"] {
		t.Fatalf("cancel by %q", last.Actor)
	}
	_ = engine.Filter{}
}

// A fan-out's pieces: each batch with its state and error, filtered and
// paged; the failures page lists failed jobs with code and message, and a
// failed job's page every failed attempt.
func TestPiecesAndFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.failingWorker()
	parent := e.submit(`{"type":"op.fanout"}`)
	e.waitState(parent.ID, domain.StateFailed)
	var l pieceList
	e.do("GET", "/api/v1/jobs/"+parent.ID+"/pieces", nil).want(t, 200).json(t, &l)
	if l.Kind != "batches" || l.Total != 6 || len(l.Pieces) != 6 || l.NextAfter != 0 {
		t.Fatalf("pieces %+v", l)
	}
	for _, p := range l.Pieces {
		want := "succeeded"
		if p.Piece == 2 || p.Piece == 5 {
			want = "failed"
		}
		if p.State != want || (want == "failed" && (p.Error == nil || !strings.Contains(p.Error.Message, fmt.Sprintf("batch %d is broken", p.Piece)))) || p.Time == nil {
			t.Fatalf("piece %+v %+v", p, p.Error)
		}
	}
	e.do("GET", "/api/v1/jobs/"+parent.ID+"/pieces?state=failed&limit=1", nil).want(t, 200).json(t, &l)
	if len(l.Pieces) != 1 || l.Pieces[0].Piece != 2 || l.NextAfter != 2 {
		t.Fatalf("first failed %+v", l)
	}
	l = pieceList{}
	e.do("GET", "/api/v1/jobs/"+parent.ID+"/pieces?state=failed&limit=1&after=2", nil).want(t, 200).json(t, &l)
	if len(l.Pieces) != 1 || l.Pieces[0].Piece != 5 || l.NextAfter != 0 {
		t.Fatalf("second failed %+v", l)
	}
	for _, q := range []string{"state=lost", "after=-1", "limit=0", "limit=x"} {
		e.do("GET", "/api/v1/jobs/"+parent.ID+"/pieces?"+q, nil).problem(t, 400, "invalid-input")
	}

	bad := e.submit(`{"type":"op.fail"}`)
	e.waitState(bad.ID, domain.StateFailed)
	// The page lists what the gateway's index has, which follows the record
	// (a CI run read it first).
	var page string
	testkit.WaitFor(t, 10*time.Second, func() error {
		page = string(e.do("GET", "/failures?error_code=BROKEN", nil).want(t, 200).body)
		for _, want := range []string{`<tr data-id="` + bad.ID + `"`, `<code>BROKEN</code>`, `the printer is on fire`, `id="fail-total">1 failed job match`} {
			if !strings.Contains(page, want) {
				return testkit.Errorf("failures page lacks %s", want)
			}
		}
		return nil
	})
	if strings.Contains(page, `<tr data-id="`+parent.ID+`"`) {
		t.Fatal("a failure of another code is listed")
	}
	page = string(e.do("GET", "/jobs/"+bad.ID, nil).want(t, 200).body)
	if !strings.Contains(page, `<tr data-attempt="1">`) || !strings.Contains(page, "the printer is on fire") {
		t.Fatalf("job page:\n%s", page)
	}
}

// A bulk operation's progress is told by every gateway of the system, not
// only the one that runs it (the bulk bucket).
func TestBulkProgressOnEveryGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g2, err := New(Config{Client: testkit.Client(t, testkit.Conn(t, e.srv), "gateway2"), Lease: 3 * time.Second, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g2.Stop(context.Background()) })
	ts2 := httptest.NewServer(g2)
	t.Cleanup(ts2.Close)
	get := func(id string) (int, bulkOp) {
		res, err := http.Get(ts2.URL + "/api/v1/bulk/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var op bulkOp
		if res.StatusCode == http.StatusOK {
			if err := json.NewDecoder(res.Body).Decode(&op); err != nil {
				t.Fatal(err)
			}
		}
		return res.StatusCode, op
	}
	for range 5 {
		e.submit(`{"type":"op.none","queue":"nobody"}`)
	}
	var op bulkOp
	e.do("POST", "/api/v1/jobs/bulk", `{"action":"cancel","query":"queue=nobody","reason":"from one gateway"}`).want(t, http.StatusAccepted).json(t, &op)
	done := e.waitBulk(op)
	var seen bulkOp
	testkit.WaitFor(t, 10*time.Second, func() error {
		code, o := get(op.ID)
		if code != http.StatusOK || o.State != "done" {
			return fmt.Errorf("the other gateway answers %d %+v", code, o)
		}
		seen = o
		return nil
	})
	if seen.Matched != 5 || seen.Changed != 5 || seen.Done != done.Done || seen.By != done.By || seen.Action != "cancel" || seen.EndedAt == nil {
		t.Fatalf("the other gateway tells %+v, the one that ran it %+v", seen, done)
	}
	if code, _ := get("bk-" + domain.NewID()); code != http.StatusNotFound {
		t.Fatalf("an unknown operation: %d", code)
	}
}

// A bulk cancel whose filter names a state skips a job that has moved on
// since it was selected (as a read shows it): a job selected queued and
// running by the time its turn comes is not cancelled.
func TestBulkCancelSkipsMovedOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := e.submit(map[string]any{"type": "bulk.moved"})
	sub, err := e.store.Record(e.ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.store.Apply(e.ctx, "claim", sub, func(j *domain.Job) (*domain.Event, error) {
		return commands.Start(j, "w1", 1, time.Now().UTC())
	}); err != nil {
		t.Fatal(err)
	}
	op := &bulkOp{Action: "cancel", state: domain.StateQueued}
	changed, skipped, err := e.g.bulkOne(e.ctx, op, job.ID, "r", nil)
	if err != nil || changed || !skipped {
		t.Fatalf("bulk cancel of a job selected queued, now running: changed %v skipped %v %v", changed, skipped, err)
	}
	if got := e.get(job.ID); got.State != domain.StateRunning {
		t.Fatalf("job %s, want running", got.State)
	}
	// Without a state in the filter it is cancelled, as before.
	changed, skipped, err = e.g.bulkOne(e.ctx, &bulkOp{Action: "cancel"}, job.ID, "r", nil)
	if err != nil || !changed || skipped {
		t.Fatalf("bulk cancel of a running job: changed %v skipped %v %v", changed, skipped, err)
	}
}
