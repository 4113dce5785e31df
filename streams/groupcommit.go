package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/domain"
)

// Limits and thresholds of a GroupCommit.
const (
	// maxGroupMsgs bounds the appends of one atomic batch (the server's
	// own limit is 1000).
	maxGroupMsgs = 500
	// maxGroupBytes bounds the bytes of one atomic batch.
	maxGroupBytes = 8 << 20
	// minGroupMsgs is the smallest group sent as an atomic batch: an R1
	// file stream stages every atomic batch in a store of its own (about
	// 12-20 ms, whatever its size), while a plain append under sync always
	// costs one fsync (about 0.5-2 ms), so fewer appends than this go as
	// plain pipelined publishes.
	minGroupMsgs = 24
	// groupTimeout bounds the wait for a batch's acknowledgement.
	groupTimeout = 30 * time.Second
)

// JetStream's atomic batch headers (ADR-50).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
	hdrExpectSeq   = "Nats-Expected-Last-Subject-Sequence"
	hdrExpectOn    = "Nats-Expected-Last-Subject-Sequence-Subject"
)

// GroupCommit is the group commit of the event log under `sync always`:
// appends that arrive while the previous group is on its way wait, and go
// together when it is acknowledged, as one atomic batch, which the server
// writes with one fsync for all of them. A lone append goes at once, alone
// (there is no timer: the window is the previous group's round trip).
//
// Every append keeps its own expected-sequence check. A batch lands whole
// or not at all: when one check fails the server refuses all of it, and
// each append of it is sent again on its own, so that only the loser is
// refused (its writer decides again) and the others land.
type GroupCommit struct {
	js jetstream.JetStream
	nc *nats.Conn

	mu    sync.Mutex
	queue []*groupMsg
	busy  bool

	batches atomic.Int64 // atomic batches committed
	batched atomic.Int64 // appends in them
	resent  atomic.Int64 // appends of refused batches sent again alone
	alone   atomic.Int64 // appends sent alone: fewer than a group waited
}

type groupMsg struct {
	m    *nats.Msg
	done chan struct{} // closed once res is set
	res  groupResult
	// Under the GroupCommit's mu: taken into a group (sent, or being
	// sent), or abandoned by its writer before that (never sent).
	taken, abandoned bool
}

type groupResult struct {
	seq uint64
	dup bool // sent again alone, and dropped by the stream as a duplicate of a message it holds
	err error
}

// resolve sets gm's result, once, and wakes its every waiter.
func (gm *groupMsg) resolve(r groupResult) {
	gm.res = r
	close(gm.done)
}

// errAbandoned: the writer of an append stopped waiting before it was sent.
var errAbandoned = errors.New("group commit: abandoned by its writer before it was sent")

// NewGroupCommit returns a group commit publishing through js.
func NewGroupCommit(js jetstream.JetStream) *GroupCommit {
	return &GroupCommit{js: js, nc: js.Conn()}
}

// GroupStats are what a GroupCommit did: atomic batches committed, the
// appends in them, the appends of refused batches sent again alone, and
// the appends sent alone because too few waited for a group.
type GroupStats struct {
	Batches, Batched, Resent, Alone int64
}

// Stats reports what the group commit did so far.
func (g *GroupCommit) Stats() GroupStats {
	return GroupStats{Batches: g.batches.Load(), Batched: g.batched.Load(), Resent: g.resent.Load(), Alone: g.alone.Load()}
}

// append queues m (its expected-sequence headers set) for the next group.
func (g *GroupCommit) append(m *nats.Msg) Future {
	gm := &groupMsg{m: m, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, gm)
	start := !g.busy
	g.busy = true
	g.mu.Unlock()
	if start {
		go g.run()
	}
	return Future{group: gm, gc: g}
}

// abandon is called when the writer of gm stops waiting for it: if it was
// not taken into a group yet it never will be, so that a write its writer
// gave up on (a claim waited for longer than its bound, behind a batch
// whose answer was lost) does not land later, unknown to it.
func (g *GroupCommit) abandon(gm *groupMsg) {
	g.mu.Lock()
	if !gm.taken {
		gm.abandoned = true
	}
	g.mu.Unlock()
}

// run sends groups until the queue is empty.
func (g *GroupCommit) run() {
	for {
		g.mu.Lock()
		var group []*groupMsg
		k, size := 0, 0
		for ; k < len(g.queue) && len(group) < maxGroupMsgs; k++ {
			gm := g.queue[k]
			if gm.abandoned {
				gm.resolve(groupResult{err: errAbandoned}) // a later Wait returns
				continue
			}
			size += len(gm.m.Data) + len(gm.m.Subject)
			if len(group) > 0 && size > maxGroupBytes {
				break
			}
			gm.taken = true
			group = append(group, gm)
		}
		g.queue = append([]*groupMsg(nil), g.queue[k:]...)
		if len(group) == 0 {
			g.busy = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		if len(group) < minGroupMsgs {
			g.alone.Add(int64(len(group)))
			g.plain(group)
			continue
		}
		if err := g.atomic(group); err != nil {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) {
				// Refused as a whole (one check failed, or the batch broke
				// a limit): nothing landed; each goes again on its own.
				g.resent.Add(int64(len(group)))
				g.plain(group)
				continue
			}
			for _, gm := range group {
				gm.resolve(groupResult{err: err})
			}
		}
	}
}

// plain publishes each of group on its own, pipelined, and resolves each.
func (g *GroupCommit) plain(group []*groupMsg) {
	futs := make([]jetstream.PubAckFuture, len(group))
	errs := make([]error, len(group))
	for i, gm := range group {
		m := &nats.Msg{Subject: gm.m.Subject, Data: gm.m.Data, Header: nats.Header{}}
		for k, v := range gm.m.Header {
			if k != hdrBatchID && k != hdrBatchSeq && k != hdrBatchCommit {
				m.Header[k] = v
			}
		}
		for try := 0; try < 100; try++ {
			futs[i], errs[i] = g.js.PublishMsgAsync(m)
			if !errors.Is(errs[i], jetstream.ErrTooManyStalledMsgs) {
				break
			}
		}
	}
	for i, gm := range group {
		if errs[i] != nil {
			gm.resolve(groupResult{err: fmt.Errorf("publish %s: %w", gm.m.Subject, errs[i])})
			continue
		}
		select {
		case ack := <-futs[i].Ok():
			gm.resolve(groupResult{seq: ack.Sequence, dup: ack.Duplicate})
		case err := <-futs[i].Err():
			gm.resolve(groupResult{err: err})
		}
	}
}

// batchAck is the server's answer to a batch's commit.
type batchAck struct {
	Stream string              `json:"stream"`
	Seq    uint64              `json:"seq"`
	Count  int                 `json:"count"`
	Error  *jetstream.APIError `json:"error"`
}

// atomic sends group as one atomic batch and, once it is committed,
// resolves each append with its sequence: the server writes a batch's
// messages one after the other, so the i-th of n is at seq-n+i.
func (g *GroupCommit) atomic(group []*groupMsg) error {
	id := nats.NewInbox()[len(nats.InboxPrefix):]
	n := len(group)
	for i, gm := range group {
		m := gm.m
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < n-1 {
			if err := g.nc.PublishMsg(m); err != nil {
				return fmt.Errorf("publish batch: %w", err)
			}
			continue
		}
		m.Header.Set(hdrBatchCommit, "1")
	}
	resp, err := g.nc.RequestMsg(group[n-1].m, groupTimeout)
	if err != nil {
		return fmt.Errorf("commit batch of %d: %w", n, err)
	}
	var ack batchAck
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return fmt.Errorf("commit batch of %d: %w", n, err)
	}
	if ack.Error != nil {
		return ack.Error
	}
	if ack.Count != n || ack.Seq < uint64(n) {
		return fmt.Errorf("commit batch of %d: the server committed %d", n, ack.Count)
	}
	g.batches.Add(1)
	g.batched.Add(int64(n))
	for i, gm := range group {
		gm.resolve(groupResult{seq: ack.Seq - uint64(n) + uint64(i) + 1})
	}
	return nil
}

// waitGroup waits for an append sent through GroupCommit g. One whose wait
// ends before it was sent is never sent (GroupCommit.abandon).
func waitGroup(ctx context.Context, g *GroupCommit, gm *groupMsg) (groupResult, error) {
	select {
	case <-gm.done:
		r := gm.res
		if r.err != nil {
			if IsConflict(r.err) {
				return r, fmt.Errorf("%w: %v", domain.ErrConflict, r.err)
			}
			return r, r.err
		}
		return r, nil
	case <-ctx.Done():
		g.abandon(gm)
		return groupResult{}, ctx.Err()
	}
}

// expectMsg is an append of data to subject on the condition that the
// last sequence on expectOn (subject itself if empty) is expect.
func expectMsg(subject string, data []byte, expect uint64, expectOn string) *nats.Msg {
	return withExpect(&nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}, expect, expectOn)
}

// withExpect sets m's expected-sequence headers (keeping its others).
func withExpect(m *nats.Msg, expect uint64, expectOn string) *nats.Msg {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(hdrExpectSeq, strconv.FormatUint(expect, 10))
	if expectOn != "" {
		m.Header.Set(hdrExpectOn, expectOn)
	}
	return m
}
