package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/lifecycle"
	"github.com/jetflow/jetflow/streams"
)

// DefaultLeaderTTL is how long a leader that stopped renewing keeps the
// lead, and so how long a failover can take.
const DefaultLeaderTTL = 10 * time.Second

// Leader runs components on exactly one of the engines that run a Leader
// of the same name: leadership is a key in a KV bucket whose entries expire
// TTL after their last write (the server's clock decides). The leader
// renews it every TTL/4 with a revision-checked update; a candidate takes it
// with a create, which only succeeds once the key has expired or was given
// up. A leader that cannot renew for TTL/2 steps down on its own, well
// before anyone else can take over, so two leaders never act at once unless
// a process is frozen for longer than that; everything the led components
// write is revision-checked besides.
type Leader struct {
	store *store.Store
	cfg   LeaderConfig
	log   *slog.Logger

	life    lifecycle.Loop
	leading atomic.Bool
	terms   atomic.Int64 // times this candidate became leader
}

// LeaderConfig configures a Leader.
type LeaderConfig struct {
	Name string // the election
	ID   string // this candidate
	// TTL is how long a leader that stopped renewing keeps the lead, and so
	// how long a failover can take (default DefaultLeaderTTL; at least a
	// second, the bucket's resolution).
	TTL time.Duration
	// Components run while this candidate leads, started in order and
	// stopped in reverse.
	Components []Component
	Log        *slog.Logger
}

func (c LeaderConfig) withDefaults() LeaderConfig {
	orDefault(&c.TTL, DefaultLeaderTTL)
	return c
}

func (c LeaderConfig) validate() error {
	if c.TTL < time.Second {
		return fmt.Errorf("leader %s: ttl %s is below the bucket's one-second resolution", c.Name, c.TTL)
	}
	return nil
}

// NewLeader returns a candidate for an election, running its components
// while it leads.
func NewLeader(s *store.Store, cfg LeaderConfig) *Leader {
	cfg = cfg.withDefaults()
	return &Leader{store: s, cfg: cfg,
		log: logger(cfg.Log, "leader").With("election", cfg.Name, "candidate", cfg.ID)}
}

// LeaderBucket is the KV bucket of every election, whatever the TTL its
// candidates are configured with: the bucket's own TTL (its entries' max
// age, set by the engine that created it) is the election's, and a
// candidate configured otherwise takes it, with a warning. (One bucket a
// TTL, as before, let two engines of different TTLs lead at once.) Its
// name is that of the default TTL's bucket of earlier versions, so that
// an engine of this version and one of those, at the default TTL, still
// share one election.
const LeaderBucket = "jetflow_leader_10s"

// Leading reports whether this candidate leads now.
func (l *Leader) Leading() bool { return l.leading.Load() }

// Terms is how many times this candidate became leader.
func (l *Leader) Terms() int64 { return l.terms.Load() }

// Start begins campaigning. Idempotent.
func (l *Leader) Start(ctx context.Context) error {
	return l.life.Start(func() (func(context.Context), error) {
		if err := l.cfg.validate(); err != nil {
			return nil, err
		}
		if err := streams.EnsureBucket(ctx, l.store.JS(), jetstream.KeyValueConfig{
			Bucket: LeaderBucket, Description: "jetflow leader elections", History: 1, TTL: l.cfg.TTL,
			Replicas: max(l.store.Topology().Replicas, 1), Storage: storage(l.store.Topology()),
		}); err != nil {
			return nil, fmt.Errorf("leader bucket: %w", err)
		}
		kv, err := l.store.JS().KeyValue(ctx, LeaderBucket)
		if err != nil {
			return nil, fmt.Errorf("leader bucket: %w", err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("leader bucket: %w", err)
		}
		if ttl := st.TTL(); ttl != l.cfg.TTL {
			if ttl < time.Second {
				return nil, fmt.Errorf("leader bucket %s: its ttl %s is below a second: delete the bucket to have it made again", LeaderBucket, ttl)
			}
			l.log.Warn("the election's bucket has another ttl than this engine's: taking the bucket's",
				"bucket", LeaderBucket, "bucket_ttl", ttl, "configured", l.cfg.TTL)
			l.cfg.TTL = ttl
		}
		return func(ctx context.Context) { l.campaign(ctx, kv) }, nil
	})
}

func storage(t streams.Topology) jetstream.StorageType {
	if t.MemoryStorage {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

func (l *Leader) campaign(ctx context.Context, kv jetstream.KeyValue) {
	var (
		rev        uint64
		lastRenew  time.Time
		components []Component
	)
	stepDown := func(reason string) {
		if !l.leading.Load() {
			return
		}
		l.leading.Store(false)
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for i := len(components) - 1; i >= 0; i-- {
			components[i].Stop(stopCtx)
		}
		cancel()
		components = nil
		l.log.Info("stepped down", "reason", reason)
	}
	tick := time.NewTicker(l.cfg.TTL / 4)
	defer tick.Stop()
	for {
		// Each write may take at most a quarter of the TTL, so that a
		// leader cut off from NATS steps down (at TTL/2 since its last
		// renewal, at worst 3/4 TTL) before the key can expire and another
		// engine take the lead.
		wctx, cancelWrite := context.WithTimeout(ctx, l.cfg.TTL/4)
		if l.leading.Load() {
			r, err := kv.Update(wctx, l.cfg.Name, []byte(l.cfg.ID), rev)
			switch {
			case err == nil:
				rev, lastRenew = r, time.Now()
			case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) || streams.IsConflict(err):
				stepDown("lost the lease")
			case time.Since(lastRenew) > l.cfg.TTL/2:
				stepDown("could not renew: " + err.Error())
			}
		} else if r, err := kv.Create(wctx, l.cfg.Name, []byte(l.cfg.ID)); err == nil {
			rev, lastRenew = r, time.Now()
			l.leading.Store(true)
			l.terms.Add(1)
			l.log.Info("leading")
			for i, c := range l.cfg.Components {
				if err := c.Start(ctx); err != nil {
					l.log.Error("start led component", "err", err)
					components = l.cfg.Components[:i]
					stepDown("a component failed to start")
					break
				}
			}
			if l.leading.Load() {
				components = l.cfg.Components
			}
		}
		cancelWrite()
		select {
		case <-ctx.Done():
			stepDown("stopping")
			// Give the lead up at once rather than after the TTL.
			if rev != 0 {
				dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = kv.Delete(dctx, l.cfg.Name, jetstream.LastRevision(rev))
				cancel()
			}
			return
		case <-tick.C:
		}
	}
}

// Stop stops leading (handing the lead over at once) and campaigning.
// Idempotent.
func (l *Leader) Stop(ctx context.Context) { l.life.Stop(ctx) }
