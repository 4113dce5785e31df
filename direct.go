package jetflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// backend is what a Client stands on: the engine's store, writing to
// JetStream itself (direct), or the engine's command service, with a token
// (command, tokenclient.go). Both serve every call; the Client converts
// what they return into jetflow's own types.
type backend interface {
	send(ctx context.Context, req *commands.SubmitRequest) (*projections.JobView, bool, error)
	sendMany(ctx context.Context, reqs []*commands.SubmitRequest) ([]*projections.JobView, []error)
	sendWithFiles(ctx context.Context, req *commands.SubmitRequest) (*projections.JobView, bool, error)
	get(ctx context.Context, id string) (*projections.JobView, error)
	children(ctx context.Context, id string) ([]*projections.JobView, error)
	cancel(ctx context.Context, id, reason string) (*projections.JobView, error)
	reprioritize(ctx context.Context, id string, priority int) (*projections.JobView, error)
	retry(ctx context.Context, id, key string, failedPieces bool) (*projections.JobView, error)
	wait(ctx context.Context, id string) (*projections.JobView, error)
	list(ctx context.Context, f engine.Filter, before *listCursor) ([]*projections.JobView, error)
	history(ctx context.Context, id string, follow bool, fn func(*projections.EventView) error) error
	tail(ctx context.Context, f TailFilter, after uint64, wait time.Duration) ([]*projections.EventView, uint64, error)
	queues(ctx context.Context) ([]*engine.QueueInfo, error)
	pauseQueue(ctx context.Context, queue string, paused bool) error
	changeQueueLimits(ctx context.Context, queue string, change func(domain.QueueLimits) domain.QueueLimits) (domain.QueueLimits, error)
	workers(ctx context.Context) ([]*engine.WorkerView, error)
	verify(ctx context.Context, settle time.Duration) (*projections.Report, error)
	replay(ctx context.Context) (map[domain.State]int, uint64, error)
	registerType(ctx context.Context, def commands.TypeDef) (*projections.TypeView, bool, error)
	typ(ctx context.Context, n commands.TypeName) (*projections.TypeView, error)
	types(ctx context.Context, ns string, deleted bool) ([]*projections.TypeView, error)
	setNamespace(ctx context.Context, ns string, s domain.NamespaceSettings) error
	createToken(ctx context.Context, spec commands.TokenSpec) (*projections.TokenView, error)
	tokens(ctx context.Context) ([]*projections.TokenView, error)
	revokeToken(ctx context.Context, id string) (*projections.TokenView, error)
	purge(ctx context.Context, opts PurgeOptions) ([]string, int, error)
	purgeJob(ctx context.Context, id, reason string) (int, error)
	openInput(ctx context.Context, jobID string, f domain.FileRef) (io.ReadCloser, error)
	putResult(ctx context.Context, jobID string, r io.Reader) (domain.FileRef, error)
	download(ctx context.Context, id string, w io.Writer) (domain.FileRef, error)
	// result reads a job's result kept as a file (JobView.ResultRef ref).
	result(ctx context.Context, id string, ref domain.FileRef) ([]byte, error)
	workflows
	historyBackend
	auditBackend
}

// views renders what the store listed, or passes its error on.
func views[R, V any](recs []R, err error, view func(R) V) ([]V, error) {
	if err != nil {
		return nil, err
	}
	out := make([]V, len(recs))
	for i, r := range recs {
		out[i] = view(r)
	}
	return out, nil
}

// direct is the backend of a Client without a token: the engine's store,
// on a NATS user with the engine's permissions.
type direct struct{ store *engine.Store }

func (d direct) send(ctx context.Context, req *commands.SubmitRequest) (*projections.JobView, bool, error) {
	res, err := d.store.Submit(ctx, req)
	if err != nil {
		return nil, false, err
	}
	return projections.View(res.Job), res.Created, nil
}

func (d direct) sendMany(ctx context.Context, reqs []*commands.SubmitRequest) ([]*projections.JobView, []error) {
	res := d.store.SubmitBatch(ctx, reqs)
	views, errs := make([]*projections.JobView, len(res)), make([]error, len(res))
	for i, r := range res {
		if r.Err != nil {
			errs[i] = r.Err
			continue
		}
		views[i] = projections.View(r.Job)
	}
	return views, errs
}

func (d direct) get(ctx context.Context, id string) (*projections.JobView, error) {
	snap, err := d.store.Read(ctx, id)
	if err != nil {
		return nil, err
	}
	return d.store.View(ctx, snap.Job), nil
}

func (d direct) children(ctx context.Context, id string) ([]*projections.JobView, error) {
	out := []*projections.JobView{}
	err := d.store.Children(ctx, id, 0, func(_ int, child *domain.Job) bool {
		out = append(out, projections.View(child))
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (d direct) cancel(ctx context.Context, id, reason string) (*projections.JobView, error) {
	snap, err := d.store.Cancel(ctx, id, reason)
	if errors.Is(err, commands.ErrTerminal) {
		return projections.View(snap.Job), nil
	}
	if err != nil {
		return nil, err
	}
	return projections.View(snap.Job), nil
}

func (d direct) reprioritize(ctx context.Context, id string, priority int) (*projections.JobView, error) {
	snap, err := d.store.Reprioritize(ctx, id, priority)
	if err != nil {
		return nil, err
	}
	return projections.View(snap.Job), nil
}

func (d direct) retry(ctx context.Context, id, key string, failedPieces bool) (*projections.JobView, error) {
	res, err := d.store.Retry(ctx, id, key, failedPieces)
	if err != nil {
		return nil, err
	}
	return projections.View(res.Job), nil
}

// wait watches the job's record: no polling. A job the read shows ended
// is answered at once: the read folds the log into a record behind it
// (an outcome whose record is not written yet).
func (d direct) wait(ctx context.Context, id string) (*projections.JobView, error) {
	v, err := d.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if v.State.Terminal() {
		return v, nil
	}
	w, err := d.store.KV.Watch(ctx, streams.KVKey(id))
	if err != nil {
		return nil, fmt.Errorf("watch job %s: %w", id, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("watch job %s: closed", id)
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			// Its head says whether it ended; a workflow's record holds its
			// whole graph, written again with its counts while it runs.
			head, err := streams.DecodeJobHead(e.Value())
			if err != nil {
				return nil, err
			}
			if !head.State.Terminal() {
				continue
			}
			j, err := streams.DecodeJob(e.Value())
			if err != nil {
				return nil, err
			}
			return projections.View(j), nil
		}
	}
}

// list reads the whole bucket whatever the limit: a page after a cursor
// asks for every job once (listPage).
func (d direct) list(ctx context.Context, f engine.Filter, before *listCursor) ([]*projections.JobView, error) {
	return listPage(ctx, f, before, false, d.listAll)
}

func (d direct) listAll(ctx context.Context, f engine.Filter) ([]*projections.JobView, error) {
	jobs, err := d.store.List(ctx, f)
	return views(jobs, err, projections.View)
}

func (d direct) history(ctx context.Context, id string, follow bool, fn func(*projections.EventView) error) error {
	return d.store.History(ctx, id, 0, follow, func(e *domain.Event) error { return fn(projections.ViewEvent(e)) })
}

func (d direct) tail(ctx context.Context, f TailFilter, after uint64, wait time.Duration) ([]*projections.EventView, uint64, error) {
	evs, next, err := d.store.Tail(ctx, streams.EventsFilter(f.Namespace, f.Queue, f.Type, ""), after, f.Since, 0, wait)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*projections.EventView, len(evs))
	for i, e := range evs {
		out[i] = projections.ViewTailEvent(e.Event, e.Namespace, e.Queue, e.Type)
	}
	return out, next, nil
}

func (d direct) queues(ctx context.Context) ([]*engine.QueueInfo, error) {
	return d.store.QueueInfos(ctx)
}

func (d direct) pauseQueue(ctx context.Context, queue string, paused bool) error {
	_, err := d.store.SetQueuePaused(ctx, queue, paused)
	return err
}

func (d direct) changeQueueLimits(ctx context.Context, queue string, change func(domain.QueueLimits) domain.QueueLimits) (domain.QueueLimits, error) {
	rec, err := d.store.ChangeQueueLimits(ctx, queue, change)
	if err != nil {
		return domain.QueueLimits{}, err
	}
	return rec.Limits, nil
}

func (d direct) workers(ctx context.Context) ([]*engine.WorkerView, error) {
	ws, err := d.store.Workers.List(ctx)
	return views(ws, err, func(w engine.Worker) *engine.WorkerView { return engine.ViewWorker(w.WorkerRecord, DefaultLease) })
}

func (d direct) verify(ctx context.Context, settle time.Duration) (*projections.Report, error) {
	return engine.Verify(ctx, d.store.JS, settle)
}

func (d direct) replay(ctx context.Context) (map[domain.State]int, uint64, error) {
	return engine.CountScope(ctx, d.store.JS, engine.LogScope{})
}

func (d direct) registerType(ctx context.Context, def commands.TypeDef) (*projections.TypeView, bool, error) {
	t, created, err := d.store.Types.Register(ctx, def, d.store.Actor)
	if err != nil {
		return nil, false, err
	}
	return projections.ViewType(t), created, nil
}

func (d direct) typ(ctx context.Context, n commands.TypeName) (*projections.TypeView, error) {
	t, err := d.store.Types.Type(ctx, n)
	if err != nil {
		return nil, err
	}
	return projections.ViewType(t), nil
}

func (d direct) types(ctx context.Context, ns string, deleted bool) ([]*projections.TypeView, error) {
	ts, err := d.store.Types.Types(ctx, ns, deleted)
	return views(ts, err, projections.ViewType)
}

func (d direct) setNamespace(ctx context.Context, ns string, s domain.NamespaceSettings) error {
	_, err := d.store.Types.SetNamespace(ctx, ns, s, d.store.Actor)
	return err
}

func (d direct) createToken(ctx context.Context, spec commands.TokenSpec) (*projections.TokenView, error) {
	rec, tok, err := d.store.Tokens.Create(ctx, spec, d.store.ActorOf(ctx))
	if err != nil {
		return nil, err
	}
	v := projections.ViewToken(rec)
	v.Token = tok
	return v, nil
}

func (d direct) tokens(ctx context.Context) ([]*projections.TokenView, error) {
	recs, err := d.store.Tokens.List(ctx)
	return views(recs, err, projections.ViewToken)
}

func (d direct) revokeToken(ctx context.Context, id string) (*projections.TokenView, error) {
	rec, err := d.store.Tokens.Revoke(ctx, id, d.store.ActorOf(ctx))
	if err != nil {
		return nil, err
	}
	return projections.ViewToken(rec), nil
}

// purge purges page after page (store.PurgePage, as the command
// service's purge): a dry run selects every job in one page.
func (d direct) purge(ctx context.Context, opts PurgeOptions) (ids []string, purged int, err error) {
	limit := engine.DefaultPurgeMax
	if opts.DryRun {
		limit = math.MaxInt
	}
	var end time.Time
	var after string
	for {
		page, err := d.store.PurgePage(ctx, opts.OlderThan, opts.Namespace, end, after, limit, opts.DryRun)
		ids, purged = append(ids, page.IDs...), purged+page.Purged
		if err != nil || !page.More {
			return ids, purged, err
		}
		end, after = page.LastEnd, page.LastID
	}
}

func (d direct) purgeJob(ctx context.Context, id, reason string) (int, error) {
	return d.store.Purge(ctx, id, reason)
}

// sendWithFiles stores a request's uploads under the job's id, then
// submits it recording them (docs/files.md, "Crash safety").
func (d direct) sendWithFiles(ctx context.Context, req *commands.SubmitRequest) (*projections.JobView, bool, error) {
	fs, err := d.store.Files(ctx)
	if err != nil {
		return nil, false, err
	}
	names := make([]string, len(req.Uploads))
	for i, u := range req.Uploads {
		names[i] = u.Name
	}
	if err := commands.CheckFileNames(names, commands.MaxFiles); err != nil {
		return nil, false, err
	}
	r := *req
	r.Uploads = nil
	if err := r.Validate(); err != nil {
		return nil, false, err
	}
	id := domain.NewID()
	if r.IdempotencyKey != "" {
		ns := r.Namespace
		if ns == "" {
			ns = domain.DefaultNS
		}
		id = domain.KeyedID(ns, r.IdempotencyKey)
		if snap, err := d.store.Read(ctx, id); err == nil {
			return projections.View(snap.Job), false, nil
		} else if !errors.Is(err, commands.ErrNotFound) {
			return nil, false, err
		}
	}
	var stored []string
	drop := func(err error) (*projections.JobView, bool, error) {
		if derr := fs.DeleteInputs(context.WithoutCancel(ctx), id, stored); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete the files of a refused submit: %w", derr))
		}
		return nil, false, err
	}
	for _, u := range req.Uploads {
		stored = append(stored, u.Name)
		ref, err := fs.PutInput(ctx, id, u.Name, u.Reader)
		if err != nil {
			return drop(err)
		}
		r.Files = append(r.Files, ref)
	}
	r.ID = id
	res, err := d.store.Submit(ctx, &r)
	if err != nil {
		return drop(err)
	}
	return projections.View(res.Job), res.Created, nil
}

func (d direct) openInput(ctx context.Context, jobID string, f domain.FileRef) (io.ReadCloser, error) {
	fs, err := d.store.Files(ctx)
	if err != nil {
		return nil, err
	}
	return fs.Input(ctx, jobID, f)
}

func (d direct) putResult(ctx context.Context, jobID string, r io.Reader) (domain.FileRef, error) {
	fs, err := d.store.Files(ctx)
	if err != nil {
		return domain.FileRef{}, err
	}
	return fs.PutResult(ctx, jobID, r)
}

func (d direct) result(ctx context.Context, id string, ref domain.FileRef) ([]byte, error) {
	fs, err := d.store.Files(ctx)
	if err != nil {
		return nil, err
	}
	return fs.ResultJSON(ctx, id, ref)
}

func (d direct) download(ctx context.Context, id string, w io.Writer) (domain.FileRef, error) {
	fs, err := d.store.Files(ctx)
	if err != nil {
		return domain.FileRef{}, err
	}
	snap, err := d.store.Read(ctx, id)
	if err != nil {
		return domain.FileRef{}, err
	}
	if !snap.Job.State.Terminal() {
		return domain.FileRef{}, fmt.Errorf("download %s (%s): %w", id, snap.Job.State, ErrNotEnded)
	}
	res, err := fs.Result(ctx, id)
	if err != nil {
		return domain.FileRef{}, err
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return domain.FileRef{}, err
	}
	if _, err := io.Copy(w, res); err != nil {
		return domain.FileRef{}, fmt.Errorf("download %s: %w", id, err)
	}
	return domain.FileRef{Name: files.ResultName, Size: int64(info.Size), Digest: info.Digest}, nil
}
