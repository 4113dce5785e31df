package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// workerRecord is a registered worker (the worker registry's value,
// msgpack; JSON in the API).
type workerRecord = domain.WorkerRecord

// WorkerView is a registered worker as the API shows it.
type WorkerView = engine.WorkerView

// registry is the gateway's view of the worker registry (engine.Workers):
// HTTP workers register, beat and claim through it; SDK workers write
// their own records, and both kinds are listed.
type registry struct {
	w     *engine.Workers
	lease time.Duration
	lists atomic.Int64 // reads of the whole registry (List), for tests
}

func newRegistry(store *engine.Store, lease time.Duration) *registry {
	return &registry{w: store.Workers, lease: lease}
}

// OpenRegistry opens the worker registry for reading (the CLI).
func OpenRegistry(_ context.Context, store *engine.Store) (*registry, error) {
	return newRegistry(store, engine.DefaultLease), nil
}

func errNoWorker(id string) error {
	p := newProblem(engine.ProblemNotFound, http.StatusNotFound,
		fmt.Sprintf("no worker %q is registered (never, or it stopped beating and expired): register again", id))
	p.WorkerID = id
	return p
}

// Register adds an HTTP worker.
func (r *registry) Register(ctx context.Context, req *RegisterRequest) (*workerRecord, error) {
	now := time.Now().UTC()
	rec := &workerRecord{ID: "wk-" + domain.NewID(), Name: req.Name, Kind: domain.WorkerHTTP, Types: req.Types,
		Queues: req.Queues, Concurrency: req.Concurrency, RegisteredAt: now, LastHeartbeat: now, Claims: []string{},
		Namespace: req.Namespace, BatchTypes: req.BatchTypes}
	if p := engine.PrincipalOf(ctx); p != nil {
		rec.TokenID, rec.Token = p.TokenID, p.Actor()
		rec.OnlyNamespace = p.Namespace != commands.AllNamespaces
	}
	if rec.Queues == nil {
		rec.Queues = []string{}
	}
	if err := r.w.Register(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// Get reads an HTTP worker's record and its revision.
func (r *registry) Get(ctx context.Context, id string) (*workerRecord, uint64, error) {
	if !commands.IsHTTPWorkerID(id) {
		return nil, 0, errNoWorker(id)
	}
	w, err := r.w.Get(ctx, id)
	if errors.Is(err, engine.ErrWorkerNotFound) {
		return nil, 0, errNoWorker(id)
	}
	if err != nil {
		return nil, 0, err
	}
	return w.WorkerRecord, w.Rev, nil
}

// Update changes an HTTP worker's record with fn, revision-checked: fn is
// run again on the newer record if another gateway wrote it meanwhile.
func (r *registry) Update(ctx context.Context, id string, fn func(*workerRecord)) (*workerRecord, error) {
	if !commands.IsHTTPWorkerID(id) {
		return nil, errNoWorker(id)
	}
	rec, err := r.w.Update(ctx, id, fn)
	if errors.Is(err, engine.ErrWorkerNotFound) {
		return nil, errNoWorker(id)
	}
	return rec, err
}

// Delete removes a worker.
func (r *registry) Delete(ctx context.Context, id string) error { return r.w.Delete(ctx, id) }

// List returns every registered worker, HTTP and SDK, by registration
// time: a read of the whole registry (readers that poll share one:
// Gateway.cachedWorkers).
func (r *registry) List(ctx context.Context) ([]*workerRecord, error) {
	r.lists.Add(1)
	ws, err := r.w.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*workerRecord, len(ws))
	for i, w := range ws {
		out[i] = w.WorkerRecord
	}
	return out, nil
}

// View renders a record for the API.
func (r *registry) View(rec *workerRecord) *WorkerView { return engine.ViewWorker(rec, r.lease) }

// POST /workers
func (g *Gateway) registerWorker(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, g.cfg.MaxBodyBytes)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	req, err := decodeRegister(body)
	if err == nil {
		asked := req.Namespace
		if !req.NamespaceGiven {
			asked = ""
		}
		var ns string
		if ns, err = scopeNamespace(r, commands.ActWork, asked); err == nil && ns != "" {
			req.Namespace = ns
		}
	}
	if err == nil {
		err = g.registerTypes(r, req)
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	rec, err := g.workers.Register(r.Context(), req)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	w.Header().Set("Location", "/api/v1/workers/"+rec.ID)
	writeJSON(w, http.StatusCreated, g.workers.View(rec))
}

// registerTypes registers the worker's registered types (with the
// schemas that came with them; an active type's schema must match) and
// turns their names into full names, which is what the worker serves.
//
// Every registration is checked before any is written, so a refused one
// leaves nothing behind (short of another registration of the same name
// between the check and the write, which is then refused as a conflict).
func (g *Gateway) registerTypes(r *http.Request, req *RegisterRequest) error {
	ctx := r.Context()
	defs := map[int]commands.TypeDef{}
	schemas := map[string][]byte{} // by full name, canonical
	for i, t := range req.Types {
		if !commands.Registered(t) {
			continue
		}
		names, err := commands.Candidates(req.Namespace, t)
		if err != nil {
			return err
		}
		def := commands.TypeDef{Name: names[0], Schema: req.Schemas[t]}
		if err := g.mayRegister(r, def, true); err != nil {
			return err
		}
		if err := g.store.Types.Check(ctx, def); err != nil {
			return err
		}
		// Two spellings of one type (billing:invoice, acme:billing:invoice)
		// must not bring two schemas.
		canon, _ := engine.CanonicalSchema(def.Schema) // checked above
		full := def.Name.String()
		if prev, ok := schemas[full]; ok && len(prev) > 0 && len(canon) > 0 && !bytes.Equal(prev, canon) {
			return fmt.Errorf("type %s is listed twice with two schemas: %w", full, commands.ErrSchemaConflict)
		}
		if len(canon) > 0 {
			schemas[full] = canon
		}
		defs[i] = def
	}
	for i, def := range defs {
		if _, _, err := g.store.Types.Register(ctx, def, "worker "+req.Name); err != nil {
			return err
		}
		req.Types[i] = def.Name.String()
	}
	req.Types = dedupe(req.Types)
	return nil
}

// GET /workers
func (g *Gateway) listWorkers(w http.ResponseWriter, r *http.Request) {
	recs, err := g.workers.List(r.Context())
	if err != nil {
		fail(w, r, err, "")
		return
	}
	out := struct {
		Workers []*WorkerView `json:"workers"`
	}{Workers: make([]*WorkerView, 0, len(recs))}
	for _, rec := range recs {
		if seesWorker(r, rec) == nil {
			out.Workers = append(out.Workers, g.workerView(r, rec))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// GET /workers/{id}
func (g *Gateway) getWorker(w http.ResponseWriter, r *http.Request) {
	rec, _, err := g.workers.Get(r.Context(), r.PathValue("id"))
	if err == nil {
		err = seesWorker(r, rec)
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, g.workerView(r, rec))
}

// heartbeatResponse answers a heartbeat.
type heartbeatResponse struct {
	*WorkerView
	// Jobs are the claims whose leases were renewed: the worker still holds
	// them.
	Jobs []string `json:"jobs"`
	// Lost are claims the worker no longer holds (cancelled, or requeued
	// after its lease expired): it must stop working on them, as nothing
	// it reports about them will be accepted.
	Lost []string `json:"lost"`
	// Unchecked are claims that could not be looked at now (a transient
	// NATS error): they are kept, not renewed; the next heartbeat looks
	// again. Keep working on them.
	Unchecked []string `json:"unchecked"`
}

// POST /workers/{id}/heartbeat
func (g *Gateway) heartbeat(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx := r.Context()
	body, err := readBody(w, r, g.cfg.MaxBodyBytes)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	req, err := decodeHeartbeat(body)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	rec, _, err := g.workers.Get(ctx, id)
	if err == nil {
		err = ownsWorker(r, rec)
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	// A heartbeat that waits listens before it looks: a loss after the
	// look is heard.
	var lw *lossWatch
	if wait := g.heartbeatWait(req); wait > 0 {
		release, err := g.hold(w)
		if err == nil {
			defer release()
			lw, err = g.watchLosses(id, rec.Claims)
		}
		if err != nil {
			fail(w, r, err, "")
			return
		}
		defer lw.stop()
	}
	rn, err := g.remote.Renew(ctx, id, rec.Claims)
	if err != nil {
		// Only a claim known to be lost is dropped; one that could not be
		// looked at now is kept for the next heartbeat.
		g.log.Warn("heartbeat: claims not renewed", "worker", id, "unchecked", rn.Unchecked, "err", err)
	}
	rec, err = g.beat(ctx, id, rn.Lost)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	if lw != nil && len(rn.Lost) == 0 {
		wctx, cancel := g.revocable(r)
		defer cancel()
		stop := context.AfterFunc(g.base(), cancel)
		defer stop()
		rn = lw.wait(wctx, g, id, rn, g.heartbeatWait(req))
		if rec, err = g.beat(context.WithoutCancel(ctx), id, rn.Lost); err != nil {
			fail(w, r, err, "")
			return
		}
	}
	writeJSON(w, http.StatusOK, &heartbeatResponse{WorkerView: g.workers.View(rec), Jobs: nonNil(rn.Held),
		Lost: nonNil(rn.Lost), Unchecked: nonNil(rn.Unchecked)})
}

// beat records a worker's heartbeat, and drops the claims it lost.
func (g *Gateway) beat(ctx context.Context, id string, lost []string) (*workerRecord, error) {
	return g.workers.Update(ctx, id, func(rec *workerRecord) {
		rec.LastHeartbeat = time.Now().UTC()
		rec.Claims = slices.DeleteFunc(rec.Claims, func(c string) bool { return slices.Contains(lost, c) })
	})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// DELETE /workers/{id}: the worker leaves; the jobs it holds go back to
// their queues at once (job.requeued) rather than after a lease.
func (g *Gateway) unregisterWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx := r.Context()
	rec, _, err := g.workers.Get(ctx, id)
	if err == nil {
		err = ownsWorker(r, rec)
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	released := []string{}
	for _, job := range rec.Claims {
		if engine.IsBatchID(job) {
			if g.remote.ReleaseBatch(job) == nil {
				released = append(released, job)
			}
			continue
		}
		snap, err := g.remote.Release(ctx, job, id, "worker unregistered")
		if err == nil {
			g.index.Put(snap.Job, snap.Rev)
			released = append(released, job)
		} else if !errors.Is(err, commands.ErrNotClaimant) && !errors.Is(err, commands.ErrInvalidTransition) {
			fail(w, r, err, job)
			return
		}
	}
	if err := g.workers.Delete(ctx, id); err != nil {
		fail(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "released": released})
}

// ClaimResponse answers a claim: the job claimed, or null; or a batch.
type ClaimResponse struct {
	Job   *projections.JobView `json:"job"`
	Batch *batchView           `json:"batch,omitempty"`
}

// POST /tasks/claim
func (g *Gateway) claim(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, g.cfg.MaxBodyBytes)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	req, err := decodeClaim(body)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	ctx := r.Context()
	rec, _, err := g.workers.Get(ctx, req.WorkerID)
	if err == nil {
		err = ownsWorker(r, rec)
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	// A worker holding as many live claims as its concurrency gets no
	// more: it is told so at once rather than made to wait.
	gone, err := g.checkConcurrency(ctx, rec)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	var wait time.Duration
	if req.Wait != nil {
		wait = min(time.Duration(*req.Wait), g.cfg.MaxWait)
	}
	if wait > 0 {
		release, err := g.hold(w)
		if err != nil {
			fail(w, r, err, "")
			return
		}
		defer release()
	}
	cctx, cancel := g.revocable(r)
	defer cancel()
	stop := context.AfterFunc(g.base(), cancel)
	defer stop()
	only := ""
	if rec.OnlyNamespace {
		only = rec.Namespace
	}
	got, err := g.remote.ClaimWork(cctx, engine.Scope{Worker: rec.ID, Queues: rec.Queues, Types: rec.Types,
		BatchTypes: rec.BatchTypes, Only: only}, wait)
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			writeJSON(w, http.StatusOK, ClaimResponse{}) // the gateway is stopping
			return
		}
		fail(w, r, err, "")
		return
	}
	snap := got.Snapshot
	var id string
	switch {
	case got.Batch != nil:
		id = got.Batch.ID
	case snap.Job != nil:
		id = snap.Job.ID
		g.index.Put(snap.Job, snap.Rev)
	default:
		writeJSON(w, http.StatusOK, ClaimResponse{})
		return
	}
	over := false
	_, err = g.workers.Update(context.WithoutCancel(ctx), rec.ID, func(rec *workerRecord) {
		// Counted again on the record being written: a claim of the same
		// worker that won a race meanwhile counts, claims known to be
		// over do not.
		live := 0
		for _, c := range rec.Claims {
			if !gone[c] {
				live++
			}
		}
		if over = live >= max(rec.Concurrency, 1); over {
			return
		}
		rec.LastHeartbeat = time.Now().UTC()
		if !slices.Contains(rec.Claims, id) {
			rec.Claims = append(rec.Claims, id)
		}
	})
	if err == nil && over {
		err = errConcurrency(rec)
	}
	if err != nil || ctx.Err() != nil {
		// The worker left meanwhile, or its request is gone: nobody will
		// run the job, so give it back now rather than after a lease.
		if got.Batch != nil {
			_ = g.remote.ReleaseBatch(id)
		} else if snap, rerr := g.remote.Release(context.WithoutCancel(ctx), id, rec.ID, "claim not delivered"); rerr == nil {
			g.index.Put(snap.Job, snap.Rev)
		}
		if over {
			fail(w, r, err, "") // lost a race with its own claim: the job went back
		} else if err != nil {
			fail(w, r, err, id)
		}
		return
	}
	if got.Batch != nil {
		writeJSON(w, http.StatusOK, ClaimResponse{Batch: viewBatch(got.Batch)})
		return
	}
	v := projections.View(snap.Job)
	g.withInputs(ctx, snap.Job, v)
	writeJSON(w, http.StatusOK, ClaimResponse{Job: v})
}

func errConcurrency(rec *workerRecord) error {
	p := newProblem(problemConcurrencyLimit, http.StatusConflict, fmt.Sprintf(
		"worker %s holds %d claims, its concurrency: report the end of one before claiming another", rec.ID, rec.Concurrency))
	p.WorkerID = rec.ID
	return p
}

// checkConcurrency refuses a claim of a worker that holds as many live
// claims as its concurrency (a concurrency-limit problem), and returns its
// claims known not to be live any more (finished, cancelled, lost). The
// index answers first; the records are read only when the index says the
// worker is at its limit, as the index can be a moment behind another
// gateway's writes.
func (g *Gateway) checkConcurrency(ctx context.Context, rec *workerRecord) (map[string]bool, error) {
	gone := map[string]bool{}
	held := func(s *summary) bool {
		return s.Worker == rec.ID && commands.HeldState(s.State)
	}
	live := 0
	for _, c := range rec.Claims {
		if engine.IsBatchID(c) {
			live++ // a batch is held until its worker reports it or a heartbeat finds it lost
			continue
		}
		if s := g.index.Get(c); s != nil && !held(s) {
			gone[c] = true
		} else {
			live++
		}
	}
	limit := max(rec.Concurrency, 1)
	if live < limit {
		return gone, nil
	}
	live = 0
	for _, c := range rec.Claims {
		if gone[c] {
			continue
		}
		if engine.IsBatchID(c) {
			live++
			continue
		}
		snap, err := g.store.Record(ctx, c)
		switch {
		case errors.Is(err, commands.ErrNotFound):
			gone[c] = true
		case err != nil:
			return nil, err
		case commands.CheckHolder(snap.Job, rec.ID) != nil:
			gone[c] = true
		default:
			live++
		}
	}
	if live >= limit {
		return nil, errConcurrency(rec)
	}
	return gone, nil
}

// PATCH /jobs/{id}: the claimant's report.
func (g *Gateway) patchJob(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	// A report carries a result of up to commands.MaxResultBytes.
	body, err := readBody(w, r, max(g.cfg.MaxBodyBytes, commands.MaxResultBytes+64<<10))
	if err != nil {
		fail(w, r, err, id)
		return
	}
	p, err := decodePatch(body)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	ctx := r.Context()
	if principal(r) != nil {
		rec, _, err := g.workers.Get(ctx, p.WorkerID)
		if err == nil {
			err = ownsWorker(r, rec)
		}
		if err != nil {
			fail(w, r, err, id)
			return
		}
	}
	rep := p.report()
	progress := p.Progress
	if p.State == "" && p.Event == nil {
		snap, deferred, err := g.reportProgress(ctx, id, p.WorkerID, *progress)
		if err != nil {
			fail(w, r, err, id)
			return
		}
		if deferred {
			// Coalesced: written at the end of the job's progress interval.
			w.Header().Set("Location", jobURL(id))
			writeJSON(w, http.StatusAccepted, map[string]any{"id": id, "progress": "accepted; written within " + g.cfg.ProgressInterval.String()})
			return
		}
		g.index.Put(snap.Job, snap.Rev)
		writeJSON(w, http.StatusOK, g.view(ctx, snap.Job))
		return
	}
	// A state report carries the progress still pending from earlier
	// reports, unless it brings a newer one: it is written with the report,
	// before the move, and only if the report as a whole is accepted.
	pending := g.progress.Take(id, p.WorkerID, commands.ReportEnds(p.State))
	if progress == nil {
		progress = pending
	}
	var snap engine.Snapshot
	if commands.AwaitsPieces(p.State) {
		var f *engine.FanOut
		if f, err = g.fanOut(r, p.Fanout); err == nil {
			snap, err = g.remote.FanOut(ctx, id, p.WorkerID, f, progress, rep.Event)
		}
	} else {
		snap, err = g.remote.Report(ctx, id, p.WorkerID, rep, progress)
	}
	if err != nil {
		if pending != nil {
			g.progress.PutBack(id, p.WorkerID, pending)
		}
		fail(w, r, err, id)
		return
	}
	g.index.Put(snap.Job, snap.Rev)
	if !commands.HeldState(snap.Job.State) {
		_, _ = g.workers.Update(context.WithoutCancel(ctx), p.WorkerID, func(rec *workerRecord) {
			rec.Claims = slices.DeleteFunc(rec.Claims, func(c string) bool { return c == id })
		})
	}
	writeJSON(w, http.StatusOK, g.view(ctx, snap.Job))
}
