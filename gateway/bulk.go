package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Bulk actions: retry, cancel or purge every job a list's filter selects
// (POST /api/v1/jobs/bulk). Each job's change is the ordinary one (its
// cancel, its retry: a new job with retry_of; its purge), an event named
// by the caller's token (or, without access control, the gateway), with
// the operation's id in its reason. A dry run says how many jobs the
// filter selects, for the confirmation; the operation runs in the
// background, and GET /api/v1/bulk/{id} tells its progress.

// Limits of bulk actions.
const (
	maxBulkJobs    = 100_000           // jobs one operation may select
	bulkWorkers    = 8                 // jobs changed at once
	maxBulkOps     = 100               // operations kept for their progress
	bulkKeep       = time.Hour         // an operation's progress is kept this long after it ends
	maxBulkErrors  = 10                // errors an operation's progress lists
	bulkReasonDflt = "bulk action"     // the reason of a cancel or purge given none
	bulkOpPrefix   = "bk-"             // operation ids
	bulkStateRun   = "running"         // an operation's states
	bulkStateDone  = "done"            //
	bulkStateStop  = "stopped"         // the gateway stopped before it ended
	bulkRetryNote  = "already retried" //
)

// Bulk actions, and the role action each needs.
var bulkActions = map[string]commands.Action{
	"retry": commands.ActRetry, "cancel": commands.ActCancel, "purge": commands.ActAdmin,
}

// bulkRequest is the body of POST /jobs/bulk.
type bulkRequest struct {
	Action string `json:"action"` // retry, cancel or purge
	// Query selects the jobs as GET /jobs's query does
	// ("state=failed&error_code=TIMEOUT&since=1h"), every page of it.
	Query  string `json:"query"`
	DryRun bool   `json:"dry_run,omitempty"`
	Reason string `json:"reason,omitempty"`
	// FailedPieces (retry only): run again only the failed pieces of
	// each fan-out selected; a job without any is skipped.
	FailedPieces bool `json:"failed_pieces,omitempty"`
}

// bulkOp is a bulk operation and how far it got.
type bulkOp struct {
	ID     string `json:"id,omitempty"`
	Action string `json:"action"`
	Query  string `json:"query"`
	DryRun bool   `json:"dry_run,omitempty"`
	// FailedPieces: a retry of the fan-outs' failed pieces only.
	FailedPieces bool       `json:"failed_pieces,omitempty"`
	Matched      int        `json:"matched"` // jobs the filter selected
	Done         int        `json:"done"`    // of them, handled
	Changed      int        `json:"changed"` // cancelled, retried or purged
	Skipped      int        `json:"skipped"` // not applicable (a cancel of a finished job, a retry of one running or retried already)
	Failed       int        `json:"failed"`  // refused for another reason (Errors)
	Errors       []string   `json:"errors,omitempty"`
	State        string     `json:"state,omitempty"` // running, done, stopped
	By           string     `json:"by,omitempty"`    // who asked
	StartedAt    *time.Time `json:"started_at,omitempty"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`

	namespace string       // "": every one (who may read its progress)
	state     domain.State // the state the filter selected, if it named one
}

// bulkOps are the operations of this gateway. Their progress is also
// written to the bulk bucket (streams.BulkBucket), at most every
// bulkFlush and when an operation ends, so that every gateway can tell it.
type bulkOps struct {
	mu  sync.Mutex
	ops map[string]*bulkOp

	kvMu sync.Mutex
	kv   jetstream.KeyValue // opened at the first operation
}

// bulkFlush is how often a running operation's progress is written for
// the other gateways.
const bulkFlush = 500 * time.Millisecond

// storedBulkOp is an operation's progress as the bulk bucket holds it.
type storedBulkOp struct {
	Op        bulkOp `json:"op"`
	Namespace string `json:"namespace,omitempty"` // who may read it ("": every namespace's)
}

// bucket opens (creating it if need be) the bulk bucket.
func (g *Gateway) bulkBucket(ctx context.Context) (jetstream.KeyValue, error) {
	b := &g.bulkOps
	b.kvMu.Lock()
	defer b.kvMu.Unlock()
	if b.kv != nil {
		return b.kv, nil
	}
	kv, err := g.store.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: streams.BulkBucket,
		Description: "bulk operations' progress (POST /api/v1/jobs/bulk)", History: 1, TTL: bulkKeep})
	if err != nil {
		return nil, fmt.Errorf("bulk bucket: %w", err)
	}
	b.kv = kv
	return kv, nil
}

// publishBulk writes op's progress for the other gateways; a failure is
// logged (this gateway still tells it).
func (g *Gateway) publishBulk(ctx context.Context, id string) {
	op, ok := g.bulkOps.snapshot(id)
	if !ok {
		return
	}
	kv, err := g.bulkBucket(ctx)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(storedBulkOp{Op: op, Namespace: op.namespace}); err == nil {
			_, err = kv.Put(ctx, id, b)
		}
	}
	if err != nil && ctx.Err() == nil {
		g.log.Warn("bulk operation's progress not shared", "op", id, "err", err)
	}
}

// sharedBulk reads an operation another gateway runs (or ran): false when
// there is none by that id; an error when the bucket could not be read.
func (g *Gateway) sharedBulk(ctx context.Context, id string) (bulkOp, bool, error) {
	if len(id) > 64 {
		return bulkOp{}, false, nil
	}
	kv, err := g.bulkBucket(ctx)
	if err != nil {
		return bulkOp{}, false, err
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return bulkOp{}, false, nil
	}
	if err != nil {
		return bulkOp{}, false, fmt.Errorf("bulk operation %s: %w", id, err)
	}
	var s storedBulkOp
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return bulkOp{}, false, fmt.Errorf("bulk operation %s: %w", id, err)
	}
	s.Op.namespace = s.Namespace
	if s.Op.State == bulkStateRun && time.Since(e.Created()) > bulkGone {
		// Its gateway stopped writing: it is gone, and so is the operation.
		s.Op.State = bulkStateStop
	}
	return s.Op, true, nil
}

// bulkGone is how long after its last progress a running operation of
// another gateway is taken for stopped (its gateway died).
const bulkGone = 10 * bulkFlush

func (b *bulkOps) add(op *bulkOp) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ops == nil {
		b.ops = map[string]*bulkOp{}
	}
	for id, o := range b.ops {
		if o.EndedAt != nil && time.Since(*o.EndedAt) > bulkKeep {
			delete(b.ops, id)
		}
	}
	running := 0
	for _, o := range b.ops {
		if o.State == bulkStateRun {
			running++
		}
	}
	if len(b.ops) >= maxBulkOps || running >= 4 {
		return newProblem(problemOverloaded, http.StatusServiceUnavailable,
			"this gateway runs as many bulk operations as it may now; retry when one ended")
	}
	b.ops[op.ID] = op
	return nil
}

// snapshot is a copy of an operation, to be sent.
func (b *bulkOps) snapshot(id string) (bulkOp, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	op, ok := b.ops[id]
	if !ok {
		return bulkOp{}, false
	}
	c := *op
	c.Errors = append([]string(nil), op.Errors...)
	return c, true
}

// POST /jobs/bulk
func (g *Gateway) bulk(w http.ResponseWriter, r *http.Request) {
	var req bulkRequest
	if err := g.readJSON(w, r, &req, false); err != nil {
		fail(w, r, err, "")
		return
	}
	act, ok := bulkActions[req.Action]
	if !ok {
		fail(w, r, &commands.InputError{Field: "action", Value: req.Action, Reason: "want retry, cancel or purge"}, "")
		return
	}
	if req.FailedPieces && req.Action != "retry" {
		fail(w, r, &commands.InputError{Field: "failed_pieces", Reason: "only a retry runs a fan-out's failed pieces"}, "")
		return
	}
	if err := commands.CheckReason("reason", req.Reason); err != nil {
		fail(w, r, err, "")
		return
	}
	p := principal(r)
	if g.cfg.Auth {
		if err := p.Can(act); err != nil {
			fail(w, r, err, "")
			return
		}
	}
	q, err := url.ParseQuery(req.Query)
	if err != nil {
		fail(w, r, &commands.InputError{Field: "query", Reason: "does not decode: " + err.Error()}, "")
		return
	}
	if q.Has("cursor") || q.Has("limit") {
		fail(w, r, &commands.InputError{Field: "query", Reason: "selects every page: no cursor, no limit"}, "")
		return
	}
	if p != nil && p.Namespace != commands.AllNamespaces {
		ns, err := p.Scope(act, q.Get("namespace"))
		if err != nil {
			fail(w, r, err, "")
			return
		}
		q.Set("namespace", ns)
	}
	f, _, _, err := listParams(q)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	ids, err := g.selectJobs(r.Context(), f)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	op := &bulkOp{Action: req.Action, Query: q.Encode(), DryRun: req.DryRun, FailedPieces: req.FailedPieces, Matched: len(ids), namespace: f.Namespace, state: f.State}
	if req.DryRun {
		writeJSON(w, http.StatusOK, op)
		return
	}
	now := time.Now().UTC()
	op.ID, op.State, op.StartedAt = bulkOpPrefix+domain.NewID(), bulkStateRun, &now
	ctx := g.base()
	if p != nil {
		op.By = p.Actor()
		ctx = engine.WithPrincipal(ctx, p)
	} else {
		op.By = g.store.Actor
	}
	if err := g.bulkOps.add(op); err != nil {
		fail(w, r, err, "")
		return
	}
	reason := req.Reason
	if reason == "" {
		reason = bulkReasonDflt
	}
	g.publishBulk(r.Context(), op.ID)
	go g.runBulk(ctx, op, ids, fmt.Sprintf("%s (%s by %s)", reason, op.ID, op.By))
	w.Header().Set("Location", "/api/v1/bulk/"+op.ID)
	snap, _ := g.bulkOps.snapshot(op.ID)
	writeJSON(w, http.StatusAccepted, snap)
}

// GET /bulk/{id}: an operation's progress.
func (g *Gateway) bulkStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	op, ok := g.bulkOps.snapshot(id)
	if !ok {
		var err error
		if op, ok, err = g.sharedBulk(r.Context(), id); err != nil { // another gateway's
			fail(w, r, err, "")
			return
		}
	}
	if ok && op.namespace != ownNamespace(r) && ownNamespace(r) != "" {
		ok = false // another namespace's: as if it did not exist
	}
	if !ok {
		writeProblem(w, r, newProblem(engine.ProblemNotFound, http.StatusNotFound,
			fmt.Sprintf("no bulk operation %q (operations are kept %s after they end)", id, bulkKeep)))
		return
	}
	writeJSON(w, http.StatusOK, op)
}

// selectJobs lists the ids of every job f selects, newest first, at most
// maxBulkJobs (more is refused: narrow the filter).
func (g *Gateway) selectJobs(ctx context.Context, f engine.Filter) ([]string, error) {
	if err := g.index.catchUp(ctx); err != nil {
		return nil, err
	}
	var ids []string
	var cur *Cursor
	for {
		sums, next := g.index.List(f, cur, 1000)
		if f.NeedsRecord() {
			jobs, err := g.records(ctx, sums)
			if err != nil {
				return nil, err
			}
			for _, j := range jobs {
				if f.Match(j) {
					ids = append(ids, j.ID)
				}
			}
		} else {
			for _, s := range sums {
				ids = append(ids, s.ID)
			}
		}
		if len(ids) > maxBulkJobs {
			return nil, &commands.InputError{Field: "query", Reason: fmt.Sprintf(
				"selects more than %d jobs: narrow the filter (by queue, type, time), and run it again for the rest", maxBulkJobs)}
		}
		if next == nil {
			return ids, nil
		}
		cur = next
	}
}

// retried is the set of jobs some job is a retry of (a bulk retry skips
// them: retrying everything failed twice does not run each twice).
func (x *index) retried() map[string]bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := map[string]bool{}
	for _, s := range x.order {
		if s.RetryOf != "" {
			out[s.RetryOf] = true
		}
	}
	return out
}

// runBulk changes each job, bulkWorkers at once, and keeps op's progress.
func (g *Gateway) runBulk(ctx context.Context, op *bulkOp, ids []string, reason string) {
	var retried map[string]bool
	if op.Action == "retry" {
		retried = g.index.retried()
	}
	work := make(chan string)
	var wg sync.WaitGroup
	stopFlush := make(chan struct{})
	flushed := make(chan struct{})
	go func() { // the progress, for the other gateways
		defer close(flushed)
		tick := time.NewTicker(bulkFlush)
		defer tick.Stop()
		for {
			select {
			case <-stopFlush:
				return
			case <-tick.C:
				g.publishBulk(ctx, op.ID)
			}
		}
	}()
	for range bulkWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				changed, skipped, err := g.bulkOne(ctx, op, id, reason, retried)
				g.bulkOps.mu.Lock()
				op.Done++
				switch {
				case changed:
					op.Changed++
				case skipped:
					op.Skipped++
				default:
					op.Failed++
					if len(op.Errors) < maxBulkErrors {
						op.Errors = append(op.Errors, fmt.Sprintf("%s: %v", id, err))
					}
				}
				g.bulkOps.mu.Unlock()
			}
		}()
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		work <- id
	}
	close(work)
	wg.Wait()
	g.bulkOps.mu.Lock()
	now := time.Now().UTC()
	op.EndedAt, op.State = &now, bulkStateDone
	if op.Done < op.Matched {
		op.State = bulkStateStop
	}
	g.bulkOps.mu.Unlock()
	close(stopFlush)
	<-flushed
	g.publishBulk(context.WithoutCancel(ctx), op.ID)
	g.log.Info("bulk operation ended", "op", op.ID, "action", op.Action, "matched", op.Matched, "changed", op.Changed,
		"skipped", op.Skipped, "failed", op.Failed, "by", op.By)
}

// bulkOne changes one job: changed, or skipped (the action does not apply
// to it as it is), or an error.
func (g *Gateway) bulkOne(ctx context.Context, op *bulkOp, id, reason string, retried map[string]bool) (changed, skipped bool, err error) {
	switch op.Action {
	case "cancel":
		if op.state != "" {
			// Selected in that state from the records: one that has moved
			// on since is skipped, as a client reading it is shown it (a
			// queued record an in-process claim has not written yet is
			// read running: Store.Read folds the log's last event).
			cur, err := g.store.Read(ctx, id)
			if err != nil {
				return false, errors.Is(err, commands.ErrNotFound), err
			}
			if cur.Job.State != op.state {
				return false, true, nil
			}
		}
		snap, err := g.store.Cancel(ctx, id, reason)
		if errors.Is(err, commands.ErrTerminal) {
			return false, true, nil
		}
		if err != nil {
			return false, errors.Is(err, commands.ErrNotFound), err
		}
		g.index.Put(snap.Job, snap.Rev)
		return true, false, nil
	case "retry":
		if retried[id] {
			return false, true, nil
		}
		res, err := g.store.Retry(ctx, id, "", op.FailedPieces)
		var in *commands.InputError
		if errors.Is(err, commands.ErrInvalidTransition) || errors.Is(err, commands.ErrNotFound) ||
			(errors.As(err, &in) && in.Field == "failed_pieces") {
			return false, true, nil // not finished (yet), gone, or no failed pieces
		}
		if err != nil {
			return false, false, err
		}
		g.index.Put(res.Job, res.Rev)
		return true, false, nil
	case "purge":
		_, err := g.store.Purge(ctx, id, reason)
		var pe *commands.PurgeError
		if errors.As(err, &pe) || errors.Is(err, commands.ErrNotFound) {
			return false, true, nil
		}
		return err == nil, false, err
	}
	return false, false, fmt.Errorf("no bulk action %q", op.Action)
}
