package jetflow

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// The token client's calls beyond jobs and their events: each is one verb
// of the command service (docs/protocol.md), or a few for what comes in
// pages.

// rebuildWait is how long a token client waits for a command that
// rebuilds the log (verify, replay, a purge page) when ctx has no
// deadline: the engine gives it 10 minutes.
const rebuildWait = 11 * time.Minute

// children reads the fan-out's children page after page.
func (c command) children(ctx context.Context, id string) ([]*projections.JobView, error) {
	out := []*projections.JobView{}
	after := 0
	for {
		var page struct {
			Jobs []*projections.JobView `json:"jobs"`
			Next int                    `json:"next"`
			More bool                   `json:"more"`
		}
		if err := c.call(ctx, "children", map[string]any{"id": id, "after": after}, &page, 30*time.Second); err != nil {
			return nil, err
		}
		out = append(out, page.Jobs...)
		if !page.More || page.Next <= after {
			return out, nil
		}
		after = page.Next
	}
}

func (c command) retry(ctx context.Context, id, key string, failedPieces bool) (*projections.JobView, error) {
	return c.job(ctx, "retry", map[string]any{"id": id, "idempotency_key": key, "failed_pieces": failedPieces})
}

func (c command) reprioritize(ctx context.Context, id string, priority int) (*projections.JobView, error) {
	return c.job(ctx, "reprioritize", map[string]any{"id": id, "priority": priority})
}

func (c command) queues(ctx context.Context) ([]*engine.QueueInfo, error) {
	var out struct {
		Queues []*engine.QueueInfo `json:"queues"`
	}
	if err := c.call(ctx, "queues", struct{}{}, &out, 30*time.Second); err != nil {
		return nil, err
	}
	return out.Queues, nil
}

func (c command) pauseQueue(ctx context.Context, queue string, paused bool) error {
	verb := "queue.resume"
	if paused {
		verb = "queue.pause"
	}
	var out struct{}
	return c.call(ctx, verb, map[string]string{"queue": queue}, &out, 30*time.Second)
}

// queueLimits sends a queue.limits command and returns the queue's limits
// as it answers them (as stored).
func (c command) queueLimits(ctx context.Context, req map[string]any) (domain.QueueLimits, error) {
	var out struct {
		Limits *domain.QueueLimits `json:"limits"`
	}
	if err := c.call(ctx, "queue.limits", req, &out, 30*time.Second); err != nil {
		return domain.QueueLimits{}, err
	}
	if out.Limits == nil {
		return domain.QueueLimits{}, errors.New("queue.limits: the reply has no limits")
	}
	return *out.Limits, nil
}

// changeQueueLimits reads the queue's limits (a change that gives none),
// decides the change on them, and writes it expecting them: another
// writer's change in between is a conflict, and the change is decided
// again on what it wrote, as the engine's client does.
func (c command) changeQueueLimits(ctx context.Context, queue string, change func(domain.QueueLimits) domain.QueueLimits) (domain.QueueLimits, error) {
	for try := 0; ; try++ {
		cur, err := c.queueLimits(ctx, map[string]any{"queue": queue})
		if err != nil {
			return cur, err
		}
		next := change(cur)
		l, err := c.queueLimits(ctx, map[string]any{"queue": queue, "max_running": next.MaxRunning,
			"max_running_per_user": next.MaxRunningPerUser, "max_running_per_key": next.MaxRunningPerKey,
			"rate_limit": next.RateLimit, "rate_period": next.RatePeriod.String(), "rate_key": next.RateKey,
			"priorities": next.Priorities, "max_queued": next.MaxQueued, "expect": cur})
		if errors.Is(err, commands.ErrConflict) && try < 10 {
			continue
		}
		return l, err
	}
}

func (c command) workers(ctx context.Context) ([]*engine.WorkerView, error) {
	var out struct {
		Workers []*engine.WorkerView `json:"workers"`
	}
	if err := c.call(ctx, "workers", struct{}{}, &out, 30*time.Second); err != nil {
		return nil, err
	}
	return out.Workers, nil
}

func (c command) verify(ctx context.Context, settle time.Duration) (*projections.Report, error) {
	var out struct {
		Report *projections.Report `json:"report"`
	}
	if err := c.call(ctx, "verify", map[string]string{"settle": settle.String()}, &out, rebuildWait); err != nil {
		return nil, err
	}
	if out.Report == nil {
		return nil, errors.New("verify: the reply has no report")
	}
	return out.Report, nil
}

func (c command) replay(ctx context.Context) (map[domain.State]int, uint64, error) {
	var out struct {
		States  map[domain.State]int `json:"states"`
		LastSeq uint64               `json:"last_seq"`
	}
	if err := c.call(ctx, "replay", struct{}{}, &out, rebuildWait); err != nil {
		return nil, 0, err
	}
	if out.States == nil {
		out.States = map[domain.State]int{}
	}
	return out.States, out.LastSeq, nil
}

// typeReply is what the type verbs answer.
type typeReply struct {
	Type    *projections.TypeView `json:"type"`
	Created bool                  `json:"created"`
}

func (c command) registerType(ctx context.Context, def commands.TypeDef) (*projections.TypeView, bool, error) {
	req := map[string]any{"type": def.Name.String()}
	if len(def.Schema) > 0 {
		req["schema"] = json.RawMessage(def.Schema)
	}
	if def.Description != "" {
		req["description"] = def.Description
	}
	var out typeReply
	if err := c.call(ctx, "type.register", req, &out, 30*time.Second); err != nil {
		return nil, false, err
	}
	return out.Type, out.Created, nil
}

func (c command) typ(ctx context.Context, n commands.TypeName) (*projections.TypeView, error) {
	var out typeReply
	if err := c.call(ctx, "type.get", map[string]string{"type": n.String()}, &out, 30*time.Second); err != nil {
		return nil, err
	}
	return out.Type, nil
}

func (c command) types(ctx context.Context, ns string, deleted bool) ([]*projections.TypeView, error) {
	var out struct {
		Types []*projections.TypeView `json:"types"`
	}
	if err := c.call(ctx, "types", map[string]any{"namespace": ns, "deleted": deleted}, &out, 30*time.Second); err != nil {
		return nil, err
	}
	return out.Types, nil
}

func (c command) setNamespace(ctx context.Context, ns string, s domain.NamespaceSettings) error {
	req := map[string]any{"namespace": ns, "strict_types": s.StrictTypes}
	if s.Retention > 0 {
		req["retention"] = s.Retention
	}
	var out struct{}
	return c.call(ctx, "namespace.set", req, &out, 30*time.Second)
}

// tokenReply is what the token verbs answer.
type tokenReply struct {
	Token *projections.TokenView `json:"token"`
}

func (c command) createToken(ctx context.Context, spec commands.TokenSpec) (*projections.TokenView, error) {
	if err := spec.Check(); err != nil {
		return nil, err // as the engine's client refuses it (a TTL below a second has no string the engine reads back)
	}
	req := map[string]string{"name": spec.Name, "namespace": spec.Namespace, "role": string(spec.Role)}
	if spec.TTL != 0 {
		req["ttl"] = spec.TTL.String()
	}
	var out tokenReply
	if err := c.call(ctx, "token.create", req, &out, 30*time.Second); err != nil {
		return nil, err
	}
	return out.Token, nil
}

func (c command) tokens(ctx context.Context) ([]*projections.TokenView, error) {
	var out struct {
		Tokens []*projections.TokenView `json:"tokens"`
	}
	if err := c.call(ctx, "tokens", struct{}{}, &out, 30*time.Second); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

func (c command) revokeToken(ctx context.Context, id string) (*projections.TokenView, error) {
	var out tokenReply
	if err := c.call(ctx, "token.revoke", map[string]string{"id": id}, &out, 30*time.Second); err != nil {
		return nil, err
	}
	return out.Token, nil
}

func (c command) purgeJob(ctx context.Context, id, reason string) (int, error) {
	var out struct {
		Purged int `json:"purged"`
	}
	err := c.call(ctx, "purge_job", map[string]string{"id": id, "reason": reason}, &out, 2*time.Minute)
	return out.Purged, err
}

// purge purges page after page (each the engine's PurgePage).
func (c command) purge(ctx context.Context, opts PurgeOptions) (ids []string, purged int, err error) {
	cursor := ""
	for {
		req := map[string]any{"older_than": opts.OlderThan.String(), "dry_run": opts.DryRun}
		if opts.Namespace != "" {
			req["namespace"] = opts.Namespace
		}
		if cursor != "" {
			req["cursor"] = cursor
		}
		var page struct {
			IDs        []string `json:"ids"`
			Purged     int      `json:"purged"`
			NextCursor string   `json:"next_cursor"`
			More       bool     `json:"more"`
		}
		if err := c.call(ctx, "purge", req, &page, rebuildWait); err != nil {
			return ids, purged, err
		}
		ids, purged = append(ids, page.IDs...), purged+page.Purged
		if !page.More || page.NextCursor == "" || page.NextCursor == cursor {
			return ids, purged, nil
		}
		cursor = page.NextCursor
	}
}
