package cmdservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/engine/internal/remote"
	"github.com/jetflow/jetflow/engine/internal/replay"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// The verbs beyond submit, get, cancel, list, events, wait and history:
// what the HTTP API's routes do (children, retry, queues, workers, types,
// namespaces, tokens), what the CLI's engine commands do (verify, replay,
// purge), files (files.go) and the audit (audit.go). Each answers with exactly the access rules
// of its HTTP route, decided in package commands (commands.VerbAction for
// the role, commands.Principal's methods for the rest), so that a token
// client (jetflow.ClientOptions.Token) does everything an engine's client
// does, as far as its token allows (docs/protocol.md).

// Bounds of the verbs of admin.go.
const (
	// MaxReplyBytes bounds the jobs, workers, ... of one reply (at least
	// one is sent whatever its size): the default payload limit of a NATS
	// server. A page that would be larger ends early, with more.
	MaxReplyBytes = 1 << 20
	// MaxChildrenLimit bounds a children page (and is its default).
	MaxChildrenLimit = 1000
	// MaxPurgeLimit bounds a purge page (and is its default).
	MaxPurgeLimit = 1000
	// MaxVerifySettle caps verify's settle.
	MaxVerifySettle = time.Minute
	// MaxRebuild is how long verify, replay and a purge page may take
	// (other commands: 30 s).
	MaxRebuild = 10 * time.Minute
	// MaxRebuilds bounds the verify, replay, purge, list_at and audit_verify commands one engine
	// runs at once (each reads the whole log or jobs bucket, replay and
	// verify into memory); more are overloaded (503).
	MaxRebuilds = 2
	// MaxExports bounds the audit_export commands one engine runs at once:
	// their own slots, so that slow readers of exports (each chunk waits
	// for its caller) never hold the slots of verify, replay or purge.
	MaxExports = 2
)

// rebuild takes one of the engine's MaxRebuilds slots for a command that
// reads the whole log or bucket, with the context it runs in (MaxRebuild
// long), or answers overloaded; done gives both back.
func (c *CommandServer) rebuild(k *call) (ctx context.Context, done func(), r *cmdReply) {
	return takeSlot(k, c.rebuilds, "commands that read the whole log or bucket (verify, replay, purge, list_at, audit_verify)")
}

// takeSlot takes a slot of pool, with the context the command runs in
// (MaxRebuild long), or answers overloaded naming what the pool holds.
func takeSlot(k *call, pool chan struct{}, what string) (ctx context.Context, done func(), r *cmdReply) {
	select {
	case pool <- struct{}{}:
		ctx, cancel := long(k.ctx, MaxRebuild)
		return ctx, func() { cancel(); <-pool }, nil
	default:
		return nil, nil, fail(problems.New(problems.Overloaded, http.StatusServiceUnavailable, fmt.Sprintf(
			"this engine runs its maximum of %d %s; retry once one has ended", cap(pool), what)), "")
	}
}

// call is one command of a verb of admin.go or files.go.
type call struct {
	ctx    context.Context
	verb   string
	asJSON bool
	body   []byte
	p      *commands.Principal
	reply  string // the request's reply subject (audit_export streams to it)
}

// decode decodes the body into v, or says why it does not (as answer's).
func (k *call) decode(v any) *cmdReply {
	if err := decodeCommand(k.body, k.asJSON, v); err != nil {
		return &cmdReply{Error: undecodable(k.verb, k.body, k.asJSON, v, err)}
	}
	return nil
}

// decodeFor decodes a command about one job into v, whose id field is
// *id, and refuses an id that no job can have (not-found), before anything
// is read.
func (k *call) decodeFor(v any, id *string) *cmdReply {
	if r := k.decode(v); r != nil {
		return r
	}
	if err := knownID(*id); err != nil {
		return fail(err, *id)
	}
	return nil
}

func fail(err error, jobID string) *cmdReply { return &cmdReply{Error: problem(err, jobID)} }

type verbHandler func(*CommandServer, *call) *cmdReply

// moreVerbs are the verbs of admin.go and files.go, dispatched by answer.
var moreVerbs = map[string]verbHandler{
	"children":      (*CommandServer).children,
	"retry":         (*CommandServer).retry,
	"reprioritize":  (*CommandServer).reprioritize,
	"queues":        (*CommandServer).queues,
	"queue.pause":   func(c *CommandServer, k *call) *cmdReply { return c.pause(k, true) },
	"queue.resume":  func(c *CommandServer, k *call) *cmdReply { return c.pause(k, false) },
	"queue.limits":  (*CommandServer).queueLimits,
	"workers":       (*CommandServer).workers,
	"verify":        (*CommandServer).verify,
	"replay":        (*CommandServer).replay,
	"list_at":       (*CommandServer).listAt,
	"purge":         (*CommandServer).purge,
	"purge_job":     (*CommandServer).purgeJob,
	"type.register": (*CommandServer).registerType,
	"type.get":      (*CommandServer).getType,
	"types":         (*CommandServer).types,
	"namespace.set": (*CommandServer).setNamespace,
	"token.create":  (*CommandServer).createToken,
	"tokens":        (*CommandServer).tokens,
	"token.revoke":  (*CommandServer).revokeToken,
	"file.put":      (*CommandServer).filePut,
	"file.submit":   (*CommandServer).fileSubmit,
	"file.input":    (*CommandServer).fileInput,
	"file.result":   (*CommandServer).fileResult,
	"file.download": (*CommandServer).fileDownload,
	"tail":          (*CommandServer).tail,
	"audit_verify":  (*CommandServer).auditVerify,
	"audit_pubkey":  (*CommandServer).auditPubkey,
	"audit_export":  (*CommandServer).auditExport,
}

func init() {
	more := make([]string, 0, len(moreVerbs))
	for v := range moreVerbs {
		more = append(more, v)
	}
	slices.Sort(more)
	commandVerbs = append(commandVerbs, more...)
}

// endpointName is the name of a verb's endpoint in the micro service,
// which allows no dots: queue.pause is queue-pause.
func endpointName(verb string) string { return strings.ReplaceAll(verb, ".", "-") }

// long is ctx without its 30 s deadline, for at most d (a rebuild of the
// log), still ended when the server stops.
func long(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			cancel()
		}
	})
	return lctx, func() { stop(); cancel() }
}

// fits reports whether one more item of size n fits a reply that holds
// count items of total bytes: the first always does.
func fits(count, total, n int) bool { return count == 0 || total+n <= MaxReplyBytes }

// sizeOf is the size of v's JSON, as a reply holds it.
func sizeOf(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

// emptyCommand is the body of a verb without fields: {}.
type emptyCommand struct{}

// --- jobs: children, retry ---

type childrenCommand struct {
	ID    string `json:"id" msgpack:"id"`
	After int    `json:"after,omitempty" msgpack:"after,omitempty"`
	Limit *int   `json:"limit,omitempty" msgpack:"limit,omitempty"`
}

// childrenReply is a page of a fan-out parent's children.
type childrenReply struct {
	Jobs []*projections.JobView `json:"jobs"`
	Next int                    `json:"next"` // the after of the next page: the last child's piece number
	More bool                   `json:"more"`
}

// children: GET /jobs/{id}/children of a fan-out parent, in piece order,
// in pages (the Go client's Children).
func (c *CommandServer) children(k *call) *cmdReply {
	var req childrenCommand
	if r := k.decodeFor(&req, &req.ID); r != nil {
		return r
	}
	if req.After < 0 {
		return fail(&commands.InputError{Field: "after", Value: fmt.Sprint(req.After), Reason: "must not be negative"}, req.ID)
	}
	limit := MaxChildrenLimit
	if req.Limit != nil {
		if *req.Limit < 1 || *req.Limit > MaxChildrenLimit {
			return fail(&commands.InputError{Field: "limit", Value: fmt.Sprint(*req.Limit),
				Reason: fmt.Sprintf("want 1-%d", MaxChildrenLimit)}, req.ID)
		}
		limit = *req.Limit
	}
	if err := c.sees(k.ctx, k.p, req.ID); err != nil {
		return fail(err, req.ID)
	}
	out := &childrenReply{Jobs: []*projections.JobView{}, Next: req.After}
	total := 0
	err := c.store.Children(k.ctx, req.ID, req.After, func(n int, j *domain.Job) bool {
		v := projections.View(j)
		size := sizeOf(v)
		if len(out.Jobs) == limit || !fits(len(out.Jobs), total, size) {
			out.More = true
			return false
		}
		total += size
		out.Jobs, out.Next = append(out.Jobs, v), n
		return true
	})
	if err != nil {
		return fail(err, req.ID)
	}
	return &cmdReply{Body: out}
}

type retryCommand struct {
	ID             string `json:"id" msgpack:"id"`
	IdempotencyKey string `json:"idempotency_key,omitempty" msgpack:"idempotency_key,omitempty"`
	FailedPieces   bool   `json:"failed_pieces,omitempty" msgpack:"failed_pieces,omitempty"`
}

// retry: POST /jobs/{id}/retry.
func (c *CommandServer) retry(k *call) *cmdReply {
	var req retryCommand
	if r := k.decodeFor(&req, &req.ID); r != nil {
		return r
	}
	if err := c.sees(k.ctx, k.p, req.ID); err != nil {
		return fail(err, req.ID)
	}
	res, err := c.store.Retry(k.ctx, req.ID, req.IdempotencyKey, req.FailedPieces)
	if err != nil {
		return fail(err, req.ID)
	}
	created := res.Created
	return &cmdReply{Job: projections.View(res.Job), Created: &created}
}

type reprioritizeCommand struct {
	ID       string `json:"id" msgpack:"id"`
	Priority *int   `json:"priority" msgpack:"priority"`
}

// reprioritize: POST /jobs/{id}/priority.
func (c *CommandServer) reprioritize(k *call) *cmdReply {
	var req reprioritizeCommand
	if r := k.decodeFor(&req, &req.ID); r != nil {
		return r
	}
	if req.Priority == nil {
		return fail(&commands.InputError{Field: "priority", Reason: "is required"}, req.ID)
	}
	if err := c.sees(k.ctx, k.p, req.ID); err != nil {
		return fail(err, req.ID)
	}
	snap, err := c.store.Reprioritize(k.ctx, req.ID, *req.Priority)
	if err != nil {
		return fail(err, req.ID)
	}
	return &cmdReply{Job: projections.View(snap.Job)}
}

// --- queues ---

// queues: GET /queues. A namespaced token sees the queues its namespace
// has jobs on and the default one, every count its namespace's (read from
// the jobs: a scan of the bucket), without the admitter's slots.
func (c *CommandServer) queues(k *call) *cmdReply {
	if r := k.decode(&emptyCommand{}); r != nil {
		return r
	}
	qs, err := c.store.QueueInfos(k.ctx)
	if err != nil {
		return fail(err, "")
	}
	if k.p.Scoped() {
		counts := map[string]map[domain.State]int{}
		err := c.store.Scan(k.ctx, func(j *domain.Job) {
			if j.Spec.Namespace != k.p.Namespace {
				return
			}
			if counts[j.Spec.Queue] == nil {
				counts[j.Spec.Queue] = zeroCounts()
			}
			counts[j.Spec.Queue][j.State]++
		})
		if err != nil {
			return fail(err, "")
		}
		scoped := make([]*store.QueueInfo, 0, len(qs))
		for _, q := range qs {
			jobs := counts[q.Name]
			total := 0
			for _, n := range jobs {
				total += n
			}
			if jobs == nil {
				jobs = zeroCounts()
			}
			if k.p.SeesQueue(q.Name, total) {
				scoped = append(scoped, q.Scoped(jobs))
			}
		}
		qs = scoped
	}
	return &cmdReply{Body: map[string]any{"queues": qs}}
}

// zeroCounts counts no job in every state, as the HTTP API's index does.
func zeroCounts() map[domain.State]int {
	m := make(map[domain.State]int, len(domain.States))
	for _, st := range domain.States {
		m[st] = 0
	}
	return m
}

type queueCommand struct {
	Queue string `json:"queue" msgpack:"queue"`
}

// pause: POST /queues/{queue}/pause and resume.
func (c *CommandServer) pause(k *call, paused bool) *cmdReply {
	var req queueCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	if _, err := c.store.SetQueuePaused(k.ctx, req.Queue, paused); err != nil {
		return fail(err, "")
	}
	return c.queueReply(k, req.Queue)
}

// queueReply answers a change of a queue with the queue.
func (c *CommandServer) queueReply(k *call, name string) *cmdReply {
	q, err := c.store.QueueInfo(k.ctx, name)
	if err != nil {
		return fail(err, "")
	}
	return &cmdReply{Body: map[string]any{"queue": q}}
}

type queueLimitsCommand struct {
	Queue                      string `json:"queue" msgpack:"queue"`
	commands.QueueLimitsChange `msgpack:",inline"`
	// Expect, if given, are the limits the change was decided on (as the
	// reply's limits): if the queue's are others when it is written, it is
	// refused (conflict) and nothing changes.
	Expect *domain.QueueLimits `json:"expect,omitempty" msgpack:"expect,omitempty"`
}

// queueLimits: PUT /queues/{queue}, by a token of every namespace. The
// reply has the queue, and its limits as stored (limits: the expect of a
// change decided on them).
func (c *CommandServer) queueLimits(k *call) *cmdReply {
	if err := k.p.InEveryNamespace(commands.ActAdmin); err != nil {
		return fail(err, "")
	}
	var req queueLimitsCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	if !domain.ValidQueue(req.Queue) {
		return fail(&commands.InputError{Field: "queue", Value: fmt.Sprintf("%q", req.Queue), Reason: "want 1-64 of [A-Za-z0-9_-]"}, "")
	}
	if err := req.Check(); err != nil {
		return fail(err, "")
	}
	var other *domain.QueueLimits
	rec, err := c.store.ChangeQueueLimits(k.ctx, req.Queue, func(cur domain.QueueLimits) domain.QueueLimits {
		other = nil
		if e := req.Expect; e != nil && cur != *e {
			other = &cur
			return cur // nothing changes
		}
		return req.Apply(cur)
	})
	if err == nil && other != nil {
		err = fmt.Errorf("queue %s: its limits are %+v, not those expected: %w", req.Queue, *other, commands.ErrConflict)
	}
	if err != nil {
		return fail(err, "")
	}
	q, err := c.store.QueueInfo(k.ctx, req.Queue)
	if err != nil {
		return fail(err, "")
	}
	return &cmdReply{Body: map[string]any{"queue": q, "limits": rec.Limits}}
}

// --- workers ---

// workers: GET /workers: those of the token's namespace (every one for a
// token of every namespace), by registration time.
func (c *CommandServer) workers(k *call) *cmdReply {
	if r := k.decode(&emptyCommand{}); r != nil {
		return r
	}
	ws, err := c.store.Workers().List(k.ctx)
	if err != nil {
		return fail(err, "")
	}
	out := make([]*store.WorkerView, 0, len(ws))
	for _, w := range ws {
		if k.p.SeesWorker(w.WorkerRecord) {
			out = append(out, store.ViewWorker(w.WorkerRecord, store.DefaultLease))
		}
	}
	if k.p.Scoped() {
		if err := c.scopeClaims(k.ctx, k.p, out); err != nil {
			return fail(err, "")
		}
	}
	return &cmdReply{Body: map[string]any{"workers": out}}
}

// scopeClaims leaves in each view only the claims p may see
// (remote.ClaimsSeen), the jobs' namespaces read in one batch.
func (c *CommandServer) scopeClaims(ctx context.Context, p *commands.Principal, views []*store.WorkerView) error {
	var ids []string
	for _, v := range views {
		for _, id := range v.Claims {
			ids = append(ids, remote.ClaimJob(id))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	recs, err := c.store.Records(ctx, ids)
	if err != nil {
		return err
	}
	nsOf := func(job string) (string, bool) {
		r, ok := recs[job]
		if !ok || r.Job == nil {
			return "", false
		}
		return r.Job.Spec.Namespace, true
	}
	for _, v := range views {
		v.Claims = remote.ClaimsSeen(p, v.Claims, nsOf)
	}
	return nil
}

// --- the log: verify, replay, purge (every namespace's jobs) ---

type verifyCommand struct {
	Settle *commands.Duration `json:"settle,omitempty" msgpack:"settle,omitempty"`
	scopeFields
}

// verify: replay --verify. The report's differences are cut to fit the
// reply, the last one saying how many more there are.
func (c *CommandServer) verify(k *call) *cmdReply {
	if err := k.p.InEveryNamespace(commands.ActAdmin); err != nil {
		return fail(err, "")
	}
	var req verifyCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	var settle time.Duration
	if req.Settle != nil {
		settle = time.Duration(*req.Settle)
		if settle < 0 || settle > MaxVerifySettle {
			return fail(&commands.InputError{Field: "settle", Value: settle.String(),
				Reason: fmt.Sprintf("want 0 to %s", MaxVerifySettle)}, "")
		}
	}
	sc, err := req.scope()
	if err != nil {
		return fail(err, "")
	}
	ctx, done, r := c.rebuild(k)
	if r != nil {
		return r
	}
	defer done()
	rep, err := replay.VerifyScope(ctx, c.store.JS(), sc, settle)
	if err != nil {
		return fail(err, "")
	}
	total, diffs := 0, rep.Diffs
	for i, d := range diffs {
		size := sizeOf(d)
		if !fits(i, total, size+256) {
			rep.Diffs = append(diffs[:i:i], projections.Diff{ID: "…",
				Reason: fmt.Sprintf("%d more differences not shown: the reply holds %d bytes at most", len(diffs)-i, MaxReplyBytes)})
			break
		}
		total += size
	}
	return &cmdReply{Body: map[string]any{"report": rep}}
}

// replayReply is what replay answers: how many jobs are in each state,
// rebuilt from the log, and the last event folded.
type replayReply struct {
	States  map[domain.State]int `json:"states"`
	LastSeq uint64               `json:"last_seq"`
}

// replay: replay (the jobs rebuilt from the log, counted by state).
func (c *CommandServer) replay(k *call) *cmdReply {
	if err := k.p.InEveryNamespace(commands.ActAdmin); err != nil {
		return fail(err, "")
	}
	var req scopeFields
	if r := k.decode(&req); r != nil {
		return r
	}
	sc, err := req.scope()
	if err != nil {
		return fail(err, "")
	}
	ctx, done, r := c.rebuild(k)
	if r != nil {
		return r
	}
	defer done()
	states, last, err := replay.Counts(ctx, c.store.JS(), sc)
	if err != nil {
		return fail(err, "")
	}
	return &cmdReply{Body: &replayReply{States: states, LastSeq: last}}
}

type purgeCommand struct {
	OlderThan *commands.Duration `json:"older_than,omitempty" msgpack:"older_than,omitempty"`
	Namespace string             `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	DryRun    bool               `json:"dry_run,omitempty" msgpack:"dry_run,omitempty"`
	Cursor    string             `json:"cursor,omitempty" msgpack:"cursor,omitempty"`
	Limit     *int               `json:"limit,omitempty" msgpack:"limit,omitempty"`
}

// purgeReply is a page of a purge.
type purgeReply struct {
	IDs        []string `json:"ids"`
	Purged     int      `json:"purged"`
	NextCursor string   `json:"next_cursor,omitempty"`
	More       bool     `json:"more"`
}

// purge: purge --older-than, one page (store.PurgePage).
func (c *CommandServer) purge(k *call) *cmdReply {
	if err := k.p.InEveryNamespace(commands.ActAdmin); err != nil {
		return fail(err, "")
	}
	var req purgeCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	if req.OlderThan == nil || *req.OlderThan <= 0 {
		return fail(&commands.InputError{Field: "older_than", Reason: "must be more than 0"}, "")
	}
	if req.Namespace != "" {
		if err := commands.CheckNamespace(req.Namespace); err != nil {
			return fail(err, "")
		}
	}
	limit := MaxPurgeLimit
	if req.Limit != nil {
		if *req.Limit < 1 || *req.Limit > MaxPurgeLimit {
			return fail(&commands.InputError{Field: "limit", Value: fmt.Sprint(*req.Limit), Reason: fmt.Sprintf("want 1-%d", MaxPurgeLimit)}, "")
		}
		limit = *req.Limit
	}
	var end time.Time
	var id string
	if req.Cursor != "" {
		var err error
		if end, id, err = DecodeCursor(req.Cursor); err != nil {
			return fail(err, "")
		}
	}
	ctx, done, r := c.rebuild(k)
	if r != nil {
		return r
	}
	defer done()
	older := time.Duration(*req.OlderThan)
	page, err := c.store.PurgePage(ctx, older, req.Namespace, end, id, limit, req.DryRun)
	if err != nil {
		return fail(err, "")
	}
	out := &purgeReply{IDs: page.IDs, Purged: page.Purged, More: page.More, NextCursor: req.Cursor}
	if out.IDs == nil {
		out.IDs = []string{}
	}
	if page.LastID != "" {
		out.NextCursor = EncodeCursor(page.LastEnd, page.LastID)
	}
	return &cmdReply{Body: out}
}

type purgeJobCommand struct {
	ID     string `json:"id" msgpack:"id"`
	Reason string `json:"reason,omitempty" msgpack:"reason,omitempty"`
}

// purgeJobReply is the answer of purge_job: the jobs purged (the job and
// its children).
type purgeJobReply struct {
	ID     string `json:"id"`
	Purged int    `json:"purged"`
}

// purgeJob: POST /jobs/{id}/purge. A job that is not finished (or has a
// child that is not) is refused, invalid-transition.
func (c *CommandServer) purgeJob(k *call) *cmdReply {
	var req purgeJobCommand
	if r := k.decodeFor(&req, &req.ID); r != nil {
		return r
	}
	if err := commands.CheckReason("reason", req.Reason); err != nil {
		return fail(err, req.ID)
	}
	if err := c.sees(k.ctx, k.p, req.ID); err != nil {
		return fail(err, req.ID)
	}
	if req.Reason == "" {
		req.Reason = commands.DefaultPurgeReason
	}
	n, err := c.store.Purge(k.ctx, req.ID, req.Reason)
	if err != nil {
		return fail(err, req.ID)
	}
	return &cmdReply{Body: &purgeJobReply{ID: req.ID, Purged: n}}
}

// --- types and namespaces ---

// registry is the type registry, or the reply of an engine without one.
func (c *CommandServer) registry() *cmdReply {
	if c.cfg.Types == nil {
		return fail(problems.New(problems.Unavailable, http.StatusServiceUnavailable, "this engine's command service has no type registry"), "")
	}
	return nil
}

type typeCommand struct {
	Type        string           `json:"type" msgpack:"type"`
	Schema      commands.RawJSON `json:"schema,omitempty" msgpack:"schema,omitempty"`
	Description string           `json:"description,omitempty" msgpack:"description,omitempty"`
}

// typeReply is a type, and whether its registration created it.
type typeReply struct {
	Type    *projections.TypeView `json:"type"`
	Created *bool                 `json:"created,omitempty"`
}

// registerType: PUT /types/{scope}/{category}/{name}.
func (c *CommandServer) registerType(k *call) *cmdReply {
	if r := c.registry(); r != nil {
		return r
	}
	var req typeCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	n, err := commands.ParseTypeName(req.Type)
	if err != nil {
		return fail(err, "")
	}
	if n.Internal() {
		return fail(fmt.Errorf("type %s: registered by the engine only: %w", n, commands.ErrInternalType), "")
	}
	if err := k.p.MayRegisterType(n, false, nil); err != nil {
		return fail(err, "")
	}
	t, created, err := c.cfg.Types.Register(k.ctx, commands.TypeDef{Name: n, Schema: []byte(req.Schema), Description: req.Description},
		c.store.ActorOf(k.ctx))
	if err != nil {
		return fail(err, "")
	}
	return &cmdReply{Body: &typeReply{Type: projections.ViewType(t), Created: &created}}
}

// getType: GET /types/{scope}/{category}/{name}: another namespace's is
// an unknown type.
func (c *CommandServer) getType(k *call) *cmdReply {
	if r := c.registry(); r != nil {
		return r
	}
	var req struct {
		Type string `json:"type" msgpack:"type"`
	}
	if r := k.decode(&req); r != nil {
		return r
	}
	n, err := commands.ParseTypeName(req.Type)
	if err != nil {
		return fail(err, "")
	}
	if !k.p.SeesType(n.Scope) {
		return fail(fmt.Errorf("type %s: %w", n, commands.ErrUnknownType), "")
	}
	t, err := c.cfg.Types.Type(k.ctx, n)
	if err != nil {
		return fail(err, "")
	}
	return &cmdReply{Body: &typeReply{Type: projections.ViewType(t)}}
}

type typesCommand struct {
	Namespace string `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Deleted   bool   `json:"deleted,omitempty" msgpack:"deleted,omitempty"`
}

// types: GET /types: those visible from a namespace (its own and
// @global), every type without one; a namespaced token's namespace.
func (c *CommandServer) types(k *call) *cmdReply {
	if r := c.registry(); r != nil {
		return r
	}
	var req typesCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	ns, err := k.p.Scope(commands.ActRead, req.Namespace)
	if err != nil {
		return fail(err, "")
	}
	if ns != "" {
		if err := commands.CheckNamespace(ns); err != nil {
			return fail(err, "")
		}
	}
	ts, err := c.cfg.Types.Types(k.ctx, ns, req.Deleted)
	if err != nil {
		return fail(err, "")
	}
	out := make([]*projections.TypeView, len(ts))
	for i, t := range ts {
		out[i] = projections.ViewType(t)
	}
	return &cmdReply{Body: map[string]any{"types": out}}
}

// period is a namespace's retention on the wire: a Go duration string
// ("720h"), more than 0, in JSON (domain.Period) and in msgpack alike.
type period domain.Period

func (p *period) UnmarshalJSON(b []byte) error { return (*domain.Period)(p).UnmarshalJSON(b) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (p *period) DecodeMsgpack(dec *msgpack.Decoder) error {
	s, err := dec.DecodeString()
	if err != nil {
		return fmt.Errorf("want a duration such as \"720h\"")
	}
	b, _ := json.Marshal(s)
	return p.UnmarshalJSON(b)
}

type namespaceCommand struct {
	Namespace   string `json:"namespace" msgpack:"namespace"`
	StrictTypes bool   `json:"strict_types,omitempty" msgpack:"strict_types,omitempty"`
	Retention   period `json:"retention,omitempty" msgpack:"retention,omitempty"`
}

// namespaceView is a namespace's settings.
type namespaceView struct {
	Name     string                   `json:"name"`
	Settings domain.NamespaceSettings `json:"settings"`
}

// setNamespace: PUT /namespaces/{ns}.
func (c *CommandServer) setNamespace(k *call) *cmdReply {
	if r := c.registry(); r != nil {
		return r
	}
	var req namespaceCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	if err := commands.CheckNamespace(req.Namespace); err != nil {
		return fail(err, "")
	}
	s := domain.NamespaceSettings{StrictTypes: req.StrictTypes, Retention: domain.Period(req.Retention)}
	rec, err := c.cfg.Types.SetNamespace(k.ctx, req.Namespace, s, c.store.ActorOf(k.ctx))
	if err != nil {
		return fail(err, "")
	}
	if rec != nil {
		s = rec.Settings
	}
	return &cmdReply{Body: map[string]any{"namespace": &namespaceView{Name: req.Namespace, Settings: s}}}
}

// --- tokens (admin) ---

type tokenCommand struct {
	Name      string `json:"name" msgpack:"name"`
	Namespace string `json:"namespace" msgpack:"namespace"`
	Role      string `json:"role" msgpack:"role"`
	TTL       string `json:"ttl,omitempty" msgpack:"ttl,omitempty"` // a Go duration; "": never expires
}

// noTokens is the reply of a token verb of an engine without tokens.
func (c *CommandServer) noTokens() *cmdReply {
	if c.cfg.Tokens == nil {
		return fail(problems.New(problems.Unavailable, http.StatusServiceUnavailable, "this engine's command service has no tokens"), "")
	}
	return nil
}

// createToken: POST /tokens; the reply carries the token, the only time
// it is shown.
func (c *CommandServer) createToken(k *call) *cmdReply {
	if r := c.noTokens(); r != nil {
		return r
	}
	var req tokenCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	spec, err := commands.ParseTokenSpec(req.Name, req.Namespace, req.Role, req.TTL)
	if err != nil {
		return fail(err, "")
	}
	rec, tok, err := c.cfg.Tokens.Create(k.ctx, spec, c.store.ActorOf(k.ctx))
	if err != nil {
		return fail(err, "")
	}
	v := projections.ViewToken(rec)
	v.Token = tok
	return &cmdReply{Body: map[string]any{"token": v}}
}

// tokens: GET /tokens: every token, newest first.
func (c *CommandServer) tokens(k *call) *cmdReply {
	if r := c.noTokens(); r != nil {
		return r
	}
	if r := k.decode(&emptyCommand{}); r != nil {
		return r
	}
	recs, err := c.cfg.Tokens.List(k.ctx)
	if err != nil {
		return fail(err, "")
	}
	out := make([]*projections.TokenView, len(recs))
	for i, t := range recs {
		out[i] = projections.ViewToken(t)
	}
	return &cmdReply{Body: map[string]any{"tokens": out}}
}

// revokeToken: DELETE /tokens/{id}.
func (c *CommandServer) revokeToken(k *call) *cmdReply {
	if r := c.noTokens(); r != nil {
		return r
	}
	var req struct {
		ID string `json:"id" msgpack:"id"`
	}
	if r := k.decode(&req); r != nil {
		return r
	}
	rec, err := c.cfg.Tokens.Revoke(k.ctx, req.ID, c.store.ActorOf(k.ctx))
	if err != nil {
		return fail(err, "")
	}
	return &cmdReply{Body: map[string]any{"token": projections.ViewToken(rec)}}
}
