package replay

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Scope selects part of the event log: the events of one job, or of the
// jobs of a namespace, queue and/or type (subject filters on
// jetflow.ev.<ns>.<queue>.<type>.<id>), stored from Since to Until (the
// stream's time index: the instant the log stored each event). The zero
// Scope is the whole log.
type Scope struct {
	Job       string
	Namespace string
	Queue     string
	Type      string
	Since     time.Time // zero: from the first event
	Until     time.Time // zero: up to the last event when the read starts
}

// Whole reports whether s is the whole log.
func (s Scope) Whole() bool {
	return s.Job == "" && s.Namespace == "" && s.Queue == "" && s.Type == "" && s.Since.IsZero() && s.Until.IsZero()
}

// Validate checks the scope's names and range: a specific error naming
// the field.
func (s Scope) Validate() error {
	bad := func(field, value, reason string) error {
		return &commands.InputError{Field: field, Value: value, Reason: reason}
	}
	plain := func(field, v string) error {
		if v != "" && (!domain.IsPlain(v) || len(v) > 256) {
			return bad(field, v, "want letters, digits, '_' and '-' (at most 256)")
		}
		return nil
	}
	if err := errors.Join(plain("job", s.Job), plain("namespace", s.Namespace), plain("queue", s.Queue)); err != nil {
		return err
	}
	if len(s.Type) > 256 || (s.Type != "" && !validType(s.Type)) {
		return bad("type", s.Type, "not a job type name")
	}
	if !s.Since.IsZero() && !s.Until.IsZero() && s.Until.Before(s.Since) {
		return bad("until", s.Until.UTC().Format(time.RFC3339Nano), "before since")
	}
	return nil
}

// validType: a job type is printable, without spaces or NATS wildcards
// (streams.Token escapes the rest).
func validType(t string) bool {
	for _, r := range t {
		if r <= ' ' || r == '*' || r == '>' || r == 0x7f {
			return false
		}
	}
	return true
}

// filter is the subject filter of the scope's job events.
func (s Scope) filter() string {
	if s.Job == "" && s.Namespace == "" && s.Queue == "" && s.Type == "" {
		// Every subject: a filter costs the server more than the
		// events it would skip (piece and registry events).
		return ""
	}
	return streams.EventsFilter(s.Namespace, s.Queue, s.Type, s.Job)
}

// contains reports whether job j is one of the scope's (names only).
func (s Scope) contains(j *domain.Job) bool {
	return (s.Job == "" || j.ID == s.Job) && (s.Namespace == "" || j.Spec.Namespace == s.Namespace) &&
		(s.Queue == "" || j.Spec.Queue == s.Queue) && (s.Type == "" || j.Spec.Type == s.Type)
}

// scanBatch is how many events a reader hands to a decoder at once.
const scanBatch = 256

type scanned struct {
	seq     uint64
	subject string
	data    []byte
	ev      *domain.Event
	err     error
}

// scan reads the job events of the scope in order, up to and including
// stream sequence upTo (0: the last one when it starts) and the scope's
// Until, decodes them on other goroutines and calls fn with each in
// order. It returns the last sequence it read up to.
func scan(ctx context.Context, js jetstream.JetStream, sc Scope, upTo uint64, fn func(ev *domain.Event) error) (uint64, error) {
	if upTo == 0 {
		s, err := js.Stream(ctx, streams.EventsStream)
		if err != nil {
			return 0, fmt.Errorf("events stream: %w", err)
		}
		upTo = s.CachedInfo().State.LastSeq
	}
	if upTo == 0 {
		return 0, nil
	}
	cfg := jetstream.OrderedConsumerConfig{}
	if f := sc.filter(); f != "" {
		cfg.FilterSubjects = []string{f}
	}
	if !sc.Since.IsZero() {
		since := sc.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := js.OrderedConsumer(ctx, streams.EventsStream, cfg)
	if err != nil {
		return 0, fmt.Errorf("read event log: %w", err)
	}
	if ci := cons.CachedInfo(); ci != nil && ci.NumPending == 0 {
		return upTo, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return 0, fmt.Errorf("read event log: %w", err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// reader -> decoders (round robin) -> fn, in order.
	workers := max(1, min(4, runtime.GOMAXPROCS(0)))
	ins := make([]chan []scanned, workers)
	outs := make([]chan []scanned, workers)
	var wg sync.WaitGroup
	for i := range ins {
		ins[i], outs[i] = make(chan []scanned, 4), make(chan []scanned, 4)
		wg.Add(1)
		go func(in <-chan []scanned, out chan<- []scanned) {
			defer wg.Done()
			defer close(out)
			for b := range in {
				for k := range b {
					ev, err := streams.DecodeEvent(b[k].data)
					if err != nil {
						b[k].err = fmt.Errorf("event %d: %w", b[k].seq, err)
						continue
					}
					ev.Seq, ev.Subject = b[k].seq, b[k].subject
					b[k].ev, b[k].data = ev, nil
				}
				select {
				case out <- b:
				case <-ctx.Done():
					return
				}
			}
		}(ins[i], outs[i])
	}
	var readErr error
	go func() {
		defer func() {
			for _, in := range ins {
				close(in)
			}
		}()
		n := 0
		batch := make([]scanned, 0, scanBatch)
		send := func() bool {
			select {
			case ins[n%workers] <- batch:
				n++
				batch = make([]scanned, 0, scanBatch)
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			m, err := it.Next()
			if err != nil {
				if ctx.Err() == nil {
					readErr = fmt.Errorf("read event log: %w", err)
				}
				return
			}
			meta, err := m.Metadata()
			if err != nil {
				readErr = err
				return
			}
			seq := meta.Sequence.Stream
			if seq > upTo || (!sc.Until.IsZero() && meta.Timestamp.After(sc.Until)) {
				break
			}
			// Piece events are facts about a parent's pieces, not its
			// transitions (CountPieces folds them); registry events are
			// folded by rebuildRegistry.
			if subj := m.Subject(); streams.IsJobSubject(subj) {
				batch = append(batch, scanned{seq: seq, subject: subj, data: m.Data()})
			}
			if seq >= upTo || meta.NumPending == 0 {
				break
			}
			if len(batch) == scanBatch && !send() {
				return
			}
		}
		if len(batch) > 0 {
			send()
		}
	}()
	var fnErr error
	for n := 0; ; n++ {
		b, ok := <-outs[n%workers]
		if !ok {
			break
		}
		for k := range b {
			if fnErr != nil {
				break
			}
			if b[k].err != nil {
				fnErr = b[k].err
			} else {
				fnErr = fn(b[k].ev)
			}
		}
		if fnErr != nil {
			cancel()
			break
		}
	}
	cancel()
	it.Stop()
	for _, out := range outs {
		for range out { // let the decoders end
		}
	}
	wg.Wait()
	if fnErr != nil {
		return 0, fnErr
	}
	if readErr != nil {
		return 0, readErr
	}
	if err := parent.Err(); err != nil {
		return 0, err
	}
	return upTo, nil
}

// doneJob is a job folded to a terminal state whose record the fold let
// go: its last event, a hash of its encoded record, its state and whether
// it was purged (jobs with a fan-out, workflows and steps are kept whole:
// other checks need them).
type doneJob struct {
	seq    uint64
	sum    uint64
	state  domain.State
	purged bool
	seen   bool // Verify: its record is in the bucket
}

// history is the log folded into jobs: live holds them whole, done
// (unless keepWhole) the terminal ones let go, which memory bounds to a few dozen
// bytes a job; expand folds one back from the log.
type history struct {
	js   jetstream.JetStream
	seed maphash.Seed
	live map[string]*domain.Job
	done map[string]doneJob
	keep keep
	last uint64
}

// keep is what a fold keeps of the jobs that ended.
type keep int

const (
	keepWhole keep = iota // every job whole
	keepState             // its state and last sequence
	keepSum               // and a hash of its encoded record (Verify)
)

// foldScope folds the scope's job events up to upTo (0: the last one now).
func foldScope(ctx context.Context, js jetstream.JetStream, sc Scope, upTo uint64, k keep) (*history, error) {
	h := &history{js: js, seed: maphash.MakeSeed(), live: map[string]*domain.Job{}, done: map[string]doneJob{}, keep: k}
	last, err := scan(ctx, js, sc, upTo, func(ev *domain.Event) error { return h.add(ctx, ev) })
	if err != nil {
		return nil, err
	}
	h.last = last
	return h, nil
}

func (h *history) add(ctx context.Context, ev *domain.Event) error {
	j := h.live[ev.JobID]
	if d, ok := h.done[ev.JobID]; ok {
		var err error
		if j, err = h.expand(ctx, ev.JobID, d.seq); err != nil {
			return err
		}
		delete(h.done, ev.JobID)
	}
	if j == nil && ev.Type != domain.EvSubmitted {
		// Its first events aged out of the log (the events stream's
		// MaxAge), or lie before the scope's start: what is left cannot
		// rebuild it.
		return nil
	}
	j, err := projections.Fold(j, ev)
	if err != nil {
		return fmt.Errorf("event %d: %w", ev.Seq, err)
	}
	if h.keep != keepWhole && compactable(j) {
		var sum uint64
		if h.keep == keepSum {
			if sum, err = h.sum(j); err != nil {
				return err
			}
		}
		delete(h.live, j.ID)
		h.done[j.ID] = doneJob{seq: j.Seq, sum: sum, state: intern(j.State), purged: !j.PurgedAt.IsZero()}
		return nil
	}
	h.live[j.ID] = j
	return nil
}

// compactable: a terminal job no other check reads whole (verifyUnique
// reads every unique job).
func compactable(j *domain.Job) bool {
	return j.State.Terminal() && j.Fanout == nil && j.Spec.Workflow == nil && j.Spec.Step == nil && j.Spec.Parent == "" &&
		j.Spec.Unique == nil
}

func intern(s domain.State) domain.State {
	for _, x := range domain.States {
		if x == s {
			return x
		}
	}
	return s
}

func (h *history) sum(j *domain.Job) (uint64, error) {
	b, err := streams.EncodeJob(j)
	if err != nil {
		return 0, err
	}
	return maphash.Bytes(h.seed, b), nil
}

// expand folds job id again from its events up to sequence upTo.
func (h *history) expand(ctx context.Context, id string, upTo uint64) (*domain.Job, error) {
	var j *domain.Job
	err := streams.ReadRange(ctx, h.js.Conn(), streams.EventsStream, streams.EventFilter(id), 1, upTo, math.MaxInt, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return fmt.Errorf("event %d: %w", seq, err)
		}
		ev.Seq = seq
		if j == nil && ev.Type != domain.EvSubmitted {
			return nil
		}
		j, err = projections.Fold(j, ev)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	if j == nil {
		return nil, fmt.Errorf("job %s: its events are gone from the log", id)
	}
	return j, nil
}

// jobs is the number of jobs folded.
func (h *history) jobs() int { return len(h.live) + len(h.done) }

// counts is how many jobs are in each state.
func (h *history) counts() map[domain.State]int {
	out := map[domain.State]int{}
	for _, j := range h.live {
		out[j.State]++
	}
	for _, d := range h.done {
		out[d.state]++
	}
	return out
}

// Counts folds the scope's events (see Scope) and counts the jobs in each
// state; memory holds the jobs that have not ended, and a few dozen bytes
// for each that has.
func Counts(ctx context.Context, js jetstream.JetStream, sc Scope) (map[domain.State]int, uint64, error) {
	if err := sc.Validate(); err != nil {
		return nil, 0, err
	}
	h, err := foldScope(ctx, js, sc, 0, keepState)
	if err != nil {
		return nil, 0, err
	}
	return h.counts(), h.last, nil
}

// records calls fn with every record of the jobs bucket in the scope: its
// key, its bytes, and the record decoded if records had to decode it. A
// time range holds the records of the jobs folded, and the records of the
// scope's names created in the range with no event in the log.
func (h *history) records(ctx context.Context, kv jetstream.KeyValue, sc Scope, fn func(id string, raw []byte, got *domain.Job) error) error {
	timed := !sc.Since.IsZero() || !sc.Until.IsZero()
	if sc.Job != "" {
		e, err := kv.Get(ctx, sc.Job)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		j, err := streams.DecodeJob(e.Value())
		if err != nil {
			return fmt.Errorf("record %s: %w", sc.Job, err)
		}
		if !sc.contains(j) || timed && !h.has(sc.Job) && !h.orphan(ctx, sc, j) {
			return nil
		}
		return fn(sc.Job, e.Value(), j)
	}
	names := sc.Namespace != "" || sc.Queue != "" || sc.Type != ""
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e = <-w.Updates():
		}
		if e == nil {
			return nil
		}
		id, raw := e.Key(), e.Value()
		if !names && (!timed || h.has(id)) {
			if err := fn(id, raw, nil); err != nil {
				return err
			}
			continue
		}
		j, err := streams.DecodeJob(raw)
		if err != nil {
			return fmt.Errorf("record %s: %w", id, err)
		}
		if !sc.contains(j) || timed && !h.has(id) && !h.orphan(ctx, sc, j) {
			continue
		}
		if err := fn(id, raw, j); err != nil {
			return err
		}
	}
}

func (h *history) has(id string) bool {
	if _, ok := h.live[id]; ok {
		return true
	}
	_, ok := h.done[id]
	return ok
}

// orphan reports whether record j, of no job folded, belongs to the
// scope as a record without events: created in its time range, and no
// event of it in the log (a job submitted before the range, or whose
// events aged out, is not the scope's).
func (h *history) orphan(ctx context.Context, sc Scope, j *domain.Job) bool {
	if !sc.Since.IsZero() && j.CreatedAt.Before(sc.Since) || !sc.Until.IsZero() && j.CreatedAt.After(sc.Until) {
		return false
	}
	s, err := h.js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return false
	}
	_, err = s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(streams.EventFilter(j.ID)))
	return errors.Is(err, jetstream.ErrMsgNotFound)
}
