package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/pull"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/lifecycle"
	"github.com/jetflow/jetflow/streams"
)

// PromoterConsumer is the durable consumer of a queue's due subject.
const PromoterConsumer = "promoter"

// Promoter moves scheduled jobs to their queue when they are due. A delay is
// a message schedule on the job's own subject of the queue stream; when it
// fires, the server puts the work item on the queue's due subject, and the
// Promoter records job.due (scheduled -> queued) and dispatches the job.
// It follows the queues bucket, so queues created later are promoted too.
// Several engines can run one: they share each queue's durable consumer.
type Promoter struct {
	cfg   PromoterConfig
	store *store.Store
	log   *slog.Logger

	life    lifecycle.Loop
	mu      sync.Mutex
	pullers map[string]*pull.Puller
}

// PromoterConfig configures the Promoter.
type PromoterConfig struct {
	Log *slog.Logger
}

func (c PromoterConfig) withDefaults() PromoterConfig { return c }

func (c PromoterConfig) validate() error { return nil }

// NewPromoter returns a Promoter.
func NewPromoter(s *store.Store, cfg PromoterConfig) *Promoter {
	cfg = cfg.withDefaults()
	return &Promoter{cfg: cfg, store: s, log: logger(cfg.Log, "promoter"), pullers: map[string]*pull.Puller{}}
}

// Start follows the queues bucket and promotes due jobs. Idempotent.
func (p *Promoter) Start(ctx context.Context) error {
	return p.life.Start(func() (func(context.Context), error) {
		if err := p.cfg.validate(); err != nil {
			return nil, err
		}
		kv, err := p.store.JS().KeyValue(ctx, streams.QueuesBucket)
		if err != nil {
			return nil, fmt.Errorf("queues bucket: %w", err)
		}
		w, err := kv.WatchAll(context.Background(), jetstream.IgnoreDeletes())
		if err != nil {
			return nil, fmt.Errorf("watch queues: %w", err)
		}
		return func(ctx context.Context) {
			defer func() { w.Stop() }()
			for {
				select {
				case <-ctx.Done():
					return
				case e, ok := <-w.Updates():
					if !ok {
						// nats.go ended the watch (its consumer could not be
						// made again: a cluster recovering): watch again, or
						// queues made from now on would get no promoter.
						nw := p.rewatch(ctx, kv)
						if nw == nil {
							return // ended: the deferred Stop stops the old watch
						}
						w = nw
						continue
					}
					if e == nil {
						continue // end of the initial values
					}
					if err := p.follow(ctx, e.Key()); err != nil && ctx.Err() == nil {
						p.log.Error("promote queue", "queue", e.Key(), "err", err)
					}
				}
			}
		}, nil
	})
}

// rewatch watches the queues bucket again after its watch ended, every
// second until it can or ctx ends (nil). The queues already followed are
// sent again and passed over.
func (p *Promoter) rewatch(ctx context.Context, kv jetstream.KeyValue) jetstream.KeyWatcher {
	for warned := false; ; {
		if p.store.NC().IsClosed() {
			return nil // a closed connection never comes back
		}
		w, err := kv.WatchAll(context.Background(), jetstream.IgnoreDeletes())
		if err == nil {
			return w
		}
		if !warned {
			p.log.Warn("watch queues again", "err", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (p *Promoter) follow(ctx context.Context, queue string) error {
	p.mu.Lock()
	_, ok := p.pullers[queue]
	p.mu.Unlock()
	if ok || !domain.ValidQueue(queue) {
		return nil
	}
	cons, err := p.store.JS().CreateOrUpdateConsumer(ctx, streams.QueueStream(queue), jetstream.ConsumerConfig{
		Durable:       PromoterConsumer,
		Description:   "jetflow promoter: scheduled jobs that are due",
		FilterSubject: streams.DueSubject(queue),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
	})
	if err != nil {
		return err
	}
	pl := pull.Start(cons, func() int { return 64 }, func(m jetstream.Msg) { p.promote(ctx, m) }, p.log)
	p.mu.Lock()
	p.pullers[queue] = pl
	p.mu.Unlock()
	return nil
}

func (p *Promoter) promote(ctx context.Context, m jetstream.Msg) {
	item, err := streams.DecodeWorkItem(m.Data())
	if err != nil {
		p.log.Error("malformed due item dropped", "err", err)
		_ = m.Term()
		return
	}
	lim, err := p.store.Limits().Of(ctx, item.Job.Spec.Queue)
	if err != nil {
		p.log.Warn("promote", "job", item.Job.ID, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_, _, err = p.store.Apply(ctx, "due", store.Snapshot{Job: &item.Job, Rev: item.Rev}, func(j *domain.Job) (*domain.Event, error) {
		return commands.Due(j, lim.Limited(), p.store.Actor(), time.Now().UTC())
	})
	if errors.Is(err, commands.ErrInvalidTransition) {
		_ = m.Ack() // no longer scheduled (cancelled, or promoted already)
		return
	}
	var notYet *commands.NotDueError
	if errors.As(err, &notYet) {
		// A fired schedule of an earlier delay of the job (a crash brought
		// it back): it asks again when the job is due, when the job's own
		// schedule fires too (whichever comes second finds it promoted).
		_ = m.NakWithDelay(max(time.Until(notYet.RunAt), time.Second))
		return
	}
	if err != nil {
		p.log.Warn("promote", "job", item.Job.ID, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}

// Stop stops promoting. Idempotent.
func (p *Promoter) Stop(ctx context.Context) {
	p.life.Stop(ctx)
	// Then the pullers, including one that a follow in progress added.
	p.mu.Lock()
	pullers := p.pullers
	p.pullers = map[string]*pull.Puller{}
	p.mu.Unlock()
	for _, pl := range pullers {
		pl.Signal()
	}
	for _, pl := range pullers {
		pl.Stop()
	}
}
