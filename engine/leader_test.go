package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/internal/testkit"
)

// probe is a led component that counts how many instances run at once.
type probe struct {
	running *atomic.Int32
	most    *atomic.Int32
	on      atomic.Bool
}

func (p *probe) Start(context.Context) error {
	if p.on.CompareAndSwap(false, true) {
		n := p.running.Add(1)
		for {
			m := p.most.Load()
			if n <= m || p.most.CompareAndSwap(m, n) {
				break
			}
		}
	}
	return nil
}

func (p *probe) Stop(context.Context) {
	if p.on.CompareAndSwap(true, false) {
		p.running.Add(-1)
	}
}

func TestLeaderElection(t *testing.T) {
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	var running, most atomic.Int32
	// A leader steps down TTL/4 before its key can expire: 1.5 s of margin
	// for a loaded machine's scheduling, so that two never lead at once.
	const ttl = 6 * time.Second
	type cand struct {
		l     *maintenance.Leader
		p     *probe
		close func()
	}
	var cands []*cand
	for i := 0; i < 3; i++ {
		nc := testkit.Conn(t, srv)
		p := &probe{running: &running, most: &most}
		l := maintenance.NewLeader(engine.Internal(testkit.Store(t, nc, "c")), maintenance.LeaderConfig{Name: "test", ID: fmt.Sprintf("c%d", i), TTL: ttl, Log: testkit.Logger(t), Components: []maintenance.Component{p}})
		if err := l.Start(ctx); err != nil {
			t.Fatal(err)
		}
		cands = append(cands, &cand{l: l, p: p, close: nc.Close})
		t.Cleanup(func() { l.Stop(context.Background()) })
	}
	leader := func() (*cand, error) {
		var found *cand
		for _, c := range cands {
			if c.l.Leading() {
				if found != nil {
					return nil, fmt.Errorf("two leaders")
				}
				found = c
			}
		}
		if found == nil {
			return nil, fmt.Errorf("no leader")
		}
		return found, nil
	}
	var first *cand
	testkit.WaitFor(t, 10*time.Second, func() (err error) { first, err = leader(); return err })

	// A clean stop hands the lead over at once (well within the TTL).
	t0 := time.Now()
	first.l.Stop(ctx)
	var second *cand
	testkit.WaitFor(t, 10*time.Second, func() (err error) { second, err = leader(); return err })
	if second == first {
		t.Fatal("a stopped candidate still leads")
	}
	if d := time.Since(t0); d > ttl {
		t.Fatalf("handover after a clean stop took %s", d)
	}

	// A leader that dies (its connection gone) loses the lead after the TTL.
	t0 = time.Now()
	second.close()
	var third *cand
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, c := range cands {
			if c != first && c != second && c.l.Leading() {
				third = c
				return nil
			}
		}
		return fmt.Errorf("no new leader")
	})
	if d := time.Since(t0); d < ttl/2 {
		t.Fatalf("the lead moved after %s, before the dead leader's TTL could expire", d)
	}
	// The dead one stepped down on its own.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if second.l.Leading() {
			return fmt.Errorf("dead leader still thinks it leads")
		}
		return nil
	})
	if most.Load() != 1 {
		t.Fatalf("%d led components ran at once", most.Load())
	}
	if third.l.Terms() != 1 {
		t.Fatalf("terms %d", third.l.Terms())
	}
}

// TestLeaderTTLsShareOneElection: candidates configured with different
// TTLs are candidates of one election (before, each TTL had a bucket, and
// two engines of different TTLs both led): the second takes the bucket's
// TTL, and only one leads; when the first stops, the second leads.
func TestLeaderTTLsShareOneElection(t *testing.T) {
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	var running, most atomic.Int32
	var ls []*maintenance.Leader
	for i, ttl := range []time.Duration{6 * time.Second, 3 * time.Second} {
		p := &probe{running: &running, most: &most}
		l := maintenance.NewLeader(engine.Internal(testkit.Store(t, testkit.Conn(t, srv), "c")), maintenance.LeaderConfig{Name: "engine",
			ID: fmt.Sprintf("c%d", i), TTL: ttl, Log: testkit.Logger(t), Components: []maintenance.Component{p}})
		if err := l.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Stop(context.Background()) })
		ls = append(ls, l)
		if i == 0 {
			testkit.WaitFor(t, 10*time.Second, func() error {
				if !l.Leading() {
					return fmt.Errorf("the first does not lead")
				}
				return nil
			})
		}
	}
	// Start made the election's bucket: one, of the first's TTL (before,
	// the second's Start made a bucket of its own and led in it).
	js := testkit.Store(t, testkit.Conn(t, srv), "look").JS
	var buckets []string
	for name := range js.KeyValueStoreNames(ctx).Name() {
		buckets = append(buckets, name)
	}
	kv, err := js.KeyValue(ctx, maintenance.LeaderBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil || st.TTL() != 6*time.Second || slices.ContainsFunc(buckets, func(b string) bool {
		return strings.HasPrefix(b, "jetflow_leader") && b != maintenance.LeaderBucket
	}) {
		t.Fatalf("buckets %v, election's ttl %v %v", buckets, st.TTL(), err)
	}
	if e, err := kv.Get(ctx, "engine"); err != nil || string(e.Value()) != "c0" || ls[1].Leading() {
		t.Fatalf("the election's key: %v; the second leads: %v", err, ls[1].Leading())
	}
	ls[0].Stop(ctx)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if !ls[1].Leading() {
			return fmt.Errorf("the second does not lead")
		}
		return nil
	})
	if most.Load() != 1 {
		t.Fatalf("%d led components ran at once", most.Load())
	}
}
