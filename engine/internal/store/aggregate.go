package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Kind describes one kind of event-sourced record: where its events and its
// records are, and how the one folds into the other. Jobs, types,
// namespaces, tokens and queue limits are kinds.
type Kind[R any] struct {
	Name   string // in errors and logs: "job", "type", ...
	Bucket string // the KV bucket of the records
	// Subject is the subject of key's events when the Ref does not name it
	// (a job's is in its record): of rec, or, when there is none yet, a
	// filter that finds them.
	Subject func(key string, rec *R) string
	// Seq is the sequence of the last event folded into rec.
	Seq func(rec *R) uint64
	// Fold folds one event into rec (nil: none yet).
	Fold func(rec *R, ev *domain.Event) (*R, error)
	// LastOnly: a record is the fold of its last event alone (settings
	// that replace each other), so a record behind the log catches up on
	// that one.
	LastOnly bool
	// Missing, if not nil, is the error of a key without a record (whose
	// record must exist before its events: a queue's).
	Missing func(key string) error
	// Gone, if not nil, is the error of a record whose last event ended it
	// for good (a job's job.purged): the record is deleted rather than
	// written, and reading it returns the error.
	Gone func(ev *domain.Event) error
	// RefOf names the record an event of the kind is about, for Repair (ok
	// false: not one of the kind's).
	RefOf func(ev *domain.Event) (Ref, bool)
	// Written is told of every record written or rebuilt (a cache).
	Written func(rec *R)
	// Early, if not nil, says whether a record found behind its last
	// event, ev, is only early: its writer writes it later (a claim's,
	// DeferRecord). Current writes it all the same, but it is not a
	// repair (not counted, logged at debug level).
	Early func(ev *domain.Event) bool
	// After publishes what a change implies (a job's dispatch and piece
	// events), once its record is written; the Write waits for what it
	// returns.
	After func(next Version[R], ev *domain.Event) []streams.Future
	// Mark is taken when a Write starts and given to AfterDone (what it
	// saw done is not trusted across a lost connection).
	Mark func() uint64
	// AfterDone is told, for a write whose After futures (published of
	// them, none included) were all acknowledged, whether its record was
	// written at the event's sequence and acknowledged (projected; not
	// reconciled with a later writer's); mark is Mark's at the Write's start.
	AfterDone func(next Version[R], ev *domain.Event, published int, projected bool, mark uint64)
	// Head is the chain hash of the last event folded into rec (its
	// Event.Hash, which the fold keeps): the Prev of the next event.
	Head func(rec *R) []byte
	// Encode and Decode (default streams.Marshal and streams.Unmarshal).
	Encode func(rec *R) ([]byte, error)
	Decode func(data []byte) (*R, error)
}

// Ref names one record: its key in the bucket, and the subject of its
// events ("": the Kind's Subject says).
type Ref struct {
	Key, Subject string
}

// Version is a record as it was read or written: the record (nil: none),
// its revision in the bucket (0: none), and the sequence of the last event
// on its subject then, which the next append expects.
type Version[R any] struct {
	Rec  *R
	Rev  uint64
	Last uint64
	// enc is Rec encoded as this process wrote it at Rev (nil: not known),
	// so that what follows the write (a work item) does not encode it again.
	enc []byte
}

// Aggregate reads and writes the records of one Kind: load (Current),
// decide, append with the expected sequence, decide again after a lost
// race, fold, write the record revision-checked (Change, Write).
type Aggregate[R any] struct {
	s  *Store
	k  Kind[R]
	kv jetstream.KeyValue
}

// maxDecisions bounds how often a change is decided again after losing a
// race; maxRepairs how often a repair reads again after losing one.
const (
	maxDecisions = 16
	maxRepairs   = 20
)

// repairer is an aggregate as Repair sees it.
type repairer interface {
	repair(ctx context.Context, ev *domain.Event) (bool, error)
}

// NewAggregate returns the aggregate of a kind, opening its bucket. A kind
// with RefOf is repaired by Repair.
func NewAggregate[R any](ctx context.Context, s *Store, k Kind[R]) (*Aggregate[R], error) {
	kv, err := s.js.KeyValue(ctx, k.Bucket)
	if err != nil {
		return nil, fmt.Errorf("%s bucket: %w", k.Name, err)
	}
	if k.Encode == nil {
		k.Encode = func(r *R) ([]byte, error) { return streams.Marshal(r) }
	}
	if k.Decode == nil {
		k.Decode = func(b []byte) (*R, error) {
			var r R
			if err := streams.Unmarshal(b, &r); err != nil {
				return nil, err
			}
			return &r, nil
		}
	}
	a := &Aggregate[R]{s: s, k: k, kv: kv}
	if k.RefOf != nil {
		s.kindsMu.Lock()
		s.kinds = append(s.kinds, a)
		s.kindsMu.Unlock()
	}
	return a, nil
}

// Repair brings the record an event of the registry is about (a type, a
// namespace, a token, a queue's limits) up to the log, when its writer
// died between the append and the record: the Projector calls it for every
// such event it verifies.
func (s *Store) Repair(ctx context.Context, ev *domain.Event) error {
	s.kindsMu.Lock()
	kinds := s.kinds
	s.kindsMu.Unlock()
	for _, k := range kinds {
		if ok, err := k.repair(ctx, ev); ok {
			return err
		}
	}
	return nil
}

func (a *Aggregate[R]) repair(ctx context.Context, ev *domain.Event) (bool, error) {
	ref, ok := a.k.RefOf(ev)
	if !ok {
		return false, nil
	}
	v, err := a.Current(ctx, ref)
	if err == nil && v.Rec != nil && a.k.Written != nil {
		a.k.Written(v.Rec)
	}
	return true, err
}

func (a *Aggregate[R]) subject(ref Ref, rec *R) string {
	if ref.Subject != "" {
		return ref.Subject
	}
	return a.k.Subject(ref.Key, rec)
}

func (a *Aggregate[R]) seq(rec *R) uint64 {
	if rec == nil {
		return 0
	}
	return a.k.Seq(rec)
}

// Record reads a record as the bucket has it (Rec nil: none; Last is the
// record's own last event).
func (a *Aggregate[R]) Record(ctx context.Context, key string) (Version[R], error) {
	e, err := a.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		if a.k.Missing != nil {
			return Version[R]{}, a.k.Missing(key)
		}
		return Version[R]{}, nil
	}
	if err != nil {
		return Version[R]{}, fmt.Errorf("get %s %s: %w", a.k.Name, key, err)
	}
	rec, err := a.k.Decode(e.Value())
	if err != nil {
		return Version[R]{}, fmt.Errorf("%s %s record: %w", a.k.Name, key, err)
	}
	return Version[R]{Rec: rec, Rev: e.Revision(), Last: a.seq(rec)}, nil
}

// Current reads a record as the log says it is: the bucket's record, plus
// any events it is missing (a writer that crashed between its append and
// its record), which are folded in and written back. Decisions that lost a
// race are taken again on what Current returns.
func (a *Aggregate[R]) Current(ctx context.Context, ref Ref) (Version[R], error) {
	var need uint64 // the subject's last event when this call first looked
	for try := 0; ; try++ {
		v, err := a.Record(ctx, ref.Key)
		if err != nil {
			return Version[R]{}, err
		}
		if need > 0 && v.Rec != nil && a.k.Seq(v.Rec) >= need {
			// Another repair won the race and covers every event there was
			// when this call began: that is an answer. (Looking at the log
			// again could chase writers that keep appending, e.g. a
			// hundred job.duplicate at once, for ever.)
			v.Last = a.k.Seq(v.Rec)
			return v, nil
		}
		subject := a.subject(ref, v.Rec)
		m, err := a.s.lastMsg(ctx, subject)
		if err != nil {
			return Version[R]{}, err
		}
		if m == nil {
			v.Last = 0
			return v, nil
		}
		v.Last = m.Sequence
		if v.Rec != nil && a.k.Seq(v.Rec) >= m.Sequence {
			return v, nil
		}
		if need == 0 {
			need = m.Sequence
		}
		last, err := streams.DecodeEvent(m.Data)
		if err != nil {
			return Version[R]{}, fmt.Errorf("event %d on %s: %w", m.Sequence, subject, err)
		}
		last.Seq, last.Subject = m.Sequence, m.Subject
		if a.k.Gone != nil {
			if gone := a.k.Gone(last); gone != nil {
				err := a.forget(ctx, ref.Key, v)
				if streams.IsConflict(err) && try < maxRepairs {
					continue // the record moved while it was being deleted: look again
				}
				if err != nil {
					return Version[R]{}, err
				}
				return Version[R]{}, &endedError{gone}
			}
		}
		folded, err := a.catchUp(ctx, v.Rec, subject, last)
		if err != nil {
			return Version[R]{}, err
		}
		rev, err := a.put(ref.Key, folded, v.Rev).Wait(ctx)
		if err == nil {
			if a.k.Early != nil && v.Rec != nil && a.k.Early(last) {
				a.s.Log.Debug(a.k.Name+" record written ahead of its writer", a.k.Name, ref.Key, "seq", a.k.Seq(folded))
			} else {
				a.s.repairs.Add(1)
				a.s.Log.Info(a.k.Name+" record rebuilt from the log", a.k.Name, ref.Key, "seq", a.k.Seq(folded), "was", v.Rec != nil)
			}
			if a.k.Written != nil {
				a.k.Written(folded)
			}
			return Version[R]{Rec: folded, Rev: rev, Last: v.Last}, nil
		}
		if !streams.IsConflict(err) || try >= maxRepairs {
			return Version[R]{}, fmt.Errorf("repair %s %s: %w", a.k.Name, ref.Key, err)
		}
		// Someone else wrote the record meanwhile: read it again.
	}
}

// endedError is Kind.Gone's error, as Current returns it for a record
// whose last event ended it.
type endedError struct{ error }

func (e *endedError) Unwrap() error { return e.error }

// forget deletes the record of v, left behind by a writer of its last
// event (Kind.Gone) that crashed before deleting it.
func (a *Aggregate[R]) forget(ctx context.Context, key string, v Version[R]) error {
	if v.Rec == nil {
		return nil
	}
	if err := a.kv.Delete(ctx, key, jetstream.LastRevision(v.Rev)); err != nil {
		return fmt.Errorf("delete the record of purged %s %s: %w", a.k.Name, key, err)
	}
	a.s.repairs.Add(1)
	a.s.Log.Info("record of a purged "+a.k.Name+" deleted", a.k.Name, key)
	return nil
}

// catchUp folds into cur the events of subject it is missing, up to last
// (the subject's last event, read already).
func (a *Aggregate[R]) catchUp(ctx context.Context, cur *R, subject string, last *domain.Event) (*R, error) {
	from := a.seq(cur) + 1
	if a.k.LastOnly || from == last.Seq {
		return a.k.Fold(cur, last)
	}
	folded := cur
	_, err := streams.ReadSubject(ctx, a.s.nc, streams.EventsStream, subject, from, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return fmt.Errorf("event %d: %w", seq, err)
		}
		ev.Seq = seq
		folded, err = a.k.Fold(folded, ev)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the events of %s: %w", subject, err)
	}
	if folded == nil {
		return nil, fmt.Errorf("%s events on %s: %w", a.k.Name, subject, commands.ErrNotFound)
	}
	return folded, nil
}

// put writes rec on the condition that the key's revision is rev (0: the
// key must not exist).
func (a *Aggregate[R]) put(key string, rec *R, rev uint64) streams.Future {
	data, err := a.k.Encode(rec)
	if err != nil {
		return streams.FailedFuture(fmt.Errorf("encode %s %s: %w", a.k.Name, key, err))
	}
	return a.putData(key, data, rev)
}

// putData is put of a record encoded already.
func (a *Aggregate[R]) putData(key string, data []byte, rev uint64) streams.Future {
	return a.s.w.PublishAsync(&nats.Msg{Subject: "$KV." + a.k.Bucket + "." + key, Data: data, Header: nats.Header{}},
		jetstream.WithExpectLastSequencePerSubject(rev))
}

// Change decides on a record as the log has it (Current), appends the
// event with the sequence the decision was made on, and writes the fold;
// if another writer appended first it decides again on what that one
// wrote. A nil event writes nothing and returns the record as it is.
//
// It returns the record written and the event; an error with no event is
// the decision's refusal or the append's failure; an error with an event
// is the record's failure (the change stands: the log has it, and the
// record, the Write's Next, is repaired by the next Current).
func (a *Aggregate[R]) Change(ctx context.Context, op string, ref Ref, decide func(cur *R) (*domain.Event, error)) (Version[R], *domain.Event, error) {
	for try := 0; ; try++ {
		cur, err := a.Current(ctx, ref)
		if err != nil {
			return cur, nil, err
		}
		ev, err := decide(cur.Rec)
		if err != nil || ev == nil {
			return cur, nil, err
		}
		w := &Write[R]{Ref: ref, Cur: cur, Ev: ev}
		a.Write(ctx, op, w)
		if w.Lost && try < maxDecisions {
			continue // another writer came first: decide again on what it wrote
		}
		if !w.Appended() {
			return cur, nil, w.Err
		}
		return w.Next, ev, w.Err
	}
}

// A Write is one event to append to one record's subject and fold into
// the record, and, once done, what became of it.
type Write[R any] struct {
	Ref Ref
	Cur Version[R] // what the event was decided on: the append expects Cur.Last
	Ev  *domain.Event
	// ExpectOn, if set, is the subject (filter) whose last sequence must
	// be Cur.Last, instead of the event's own (a derived job id, which must
	// be new on every subject).
	ExpectOn string
	// DeferRecord: the record is not written; its writer writes it later
	// (Store.WriteRecord), unless a write of the record's next event, on
	// the revision it has now (Next.Rev is Cur.Rev), folds this one in.
	DeferRecord bool

	// Next is the record as written, or, after a lost write of the record,
	// as Current read it; Rec alone (Rev 0) when the record failed.
	Next Version[R]
	// Lost: another writer appended first; nothing was written.
	Lost bool
	// Err is the append's error (nothing written) or, after the append,
	// the record's (the change stands).
	Err error

	appended  bool
	projected bool // its record was written at its event and acknowledged
}

// Appended reports whether the event is in the log.
func (w *Write[R]) Appended() bool { return w.appended }

// Write writes ws with the writes of each step pipelined across them: every
// append, then every record, then what each implies (Kind.After), with one
// round trip a step, not three per record. Every event names the token of
// the request it is written for (ctx's principal), when its actor is not
// that token (a worker writing through its worker token): Event.By. A process that crashes between
// two steps leaves the log ahead of the records, or a record without what
// it implies: Current and the Projector repair both. The crash points
// <op>:appended, <op>:projected and <op>:dispatched (JETFLOW_CRASH_AT) are
// reached after each step that wrote something.
func (a *Aggregate[R]) Write(ctx context.Context, op string, ws ...*Write[R]) {
	var mark uint64
	if a.k.Mark != nil {
		mark = a.k.Mark()
	}
	futs := make([]streams.Future, len(ws))
	subjects := make([]string, len(ws))
	for i, w := range ws {
		subjects[i] = a.subject(w.Ref, w.Cur.Rec)
		a.s.stamp(ctx, w.Ev)
		w.Ev.Prev = nil
		if w.Cur.Rec != nil && a.k.Head != nil {
			w.Ev.Prev = a.k.Head(w.Cur.Rec)
		}
		futs[i] = a.s.appendAsync(subjects[i], w.Ev, w.Cur.Last, w.ExpectOn)
	}
	wrote := false
	for i, w := range ws {
		seq, err := futs[i].Wait(ctx)
		switch {
		case streams.IsConflict(err):
			w.Lost = true
			fallthrough
		case err != nil:
			w.Err = fmt.Errorf("%s %s %s: append %s: %w", op, a.k.Name, w.Ref.Key, w.Ev.Type, err)
		default:
			w.Ev.Seq, w.Ev.Subject = seq, subjects[i]
			w.appended, wrote = true, true
		}
	}
	if !wrote {
		return
	}
	crash(op + ":appended")

	wrote = false
	for i, w := range ws {
		futs[i] = streams.Future{}
		if !w.appended {
			continue
		}
		if a.k.Gone != nil && a.k.Gone(w.Ev) != nil {
			continue // deleted below
		}
		next, err := a.k.Fold(w.Cur.Rec, w.Ev)
		if err != nil {
			w.Err = fmt.Errorf("fold %s into %s %s: %w", w.Ev.Type, a.k.Name, w.Ref.Key, err)
			continue
		}
		w.Next = Version[R]{Rec: next, Last: w.Ev.Seq}
		if w.DeferRecord {
			w.Next.Rev = w.Cur.Rev
			continue
		}
		data, err := a.k.Encode(next)
		if err != nil {
			futs[i] = streams.FailedFuture(fmt.Errorf("encode %s %s: %w", a.k.Name, w.Ref.Key, err))
			continue
		}
		futs[i] = a.putData(w.Ref.Key, data, w.Cur.Rev)
		w.Next.enc = data
	}
	for i, w := range ws {
		if !w.appended || w.Err != nil {
			continue
		}
		var err error
		if w.DeferRecord && w.Next.Rec != nil {
			wrote = true
			continue
		}
		if w.Next.Rec == nil { // ended for good: its record goes
			err = a.forget(ctx, w.Ref.Key, w.Cur)
			if streams.IsConflict(err) {
				// It moved meanwhile: Current deletes it, finding the
				// event last.
				var ended *endedError
				if _, err = a.Current(ctx, w.Ref); errors.As(err, &ended) {
					err = nil
				}
			}
		} else {
			var rev uint64
			rev, err = futs[i].Wait(ctx)
			if err == nil {
				w.Next.Rev, w.projected = rev, true
			} else if streams.IsConflict(err) {
				// The record moved meanwhile (the Projector repaired it, or
				// a later writer got there first): Current reconciles it
				// with the log, which has the event.
				var v Version[R]
				if v, err = a.currentSince(ctx, w.Ref, w.Ev.Seq); err == nil {
					if v.Rec == nil || a.k.Seq(v.Rec) < w.Ev.Seq {
						// Still read behind the event: the record at the
						// event is this write's own fold (the append was
						// conditional on the record it folded into), with
						// the revision read (a hint: a later write at it
						// conflicts and reads again).
						v.Rec, v.Last = w.Next.Rec, w.Ev.Seq
					}
					w.Next = v
				}
			}
			if a.k.Written != nil {
				a.k.Written(w.Next.Rec)
			}
		}
		if err != nil {
			w.Err = fmt.Errorf("project %s %s: %w", a.k.Name, w.Ref.Key, err)
			continue
		}
		wrote = true
	}
	if !wrote {
		return
	}
	crash(op + ":projected")

	if a.k.After != nil {
		type after struct {
			w    *Write[R]
			futs []streams.Future
		}
		var afters []after
		for _, w := range ws {
			if w.appended && w.Err == nil {
				afters = append(afters, after{w, a.k.After(w.Next, w.Ev)})
			}
		}
		for _, x := range afters {
			done := true
			for _, f := range x.futs {
				if _, err := f.Wait(ctx); err != nil {
					// The change stands; the Projector repeats what is missing.
					a.s.Log.Warn("after "+x.w.Ev.Type+" failed; the projector repeats it", a.k.Name, x.w.Ref.Key, "err", err)
					done = false
				}
			}
			if done && a.k.AfterDone != nil {
				a.k.AfterDone(x.w.Next, x.w.Ev, len(x.futs), x.w.projected, mark)
			}
		}
	}
	crash(op + ":dispatched")
}

// currentSince is Current, read again while its record is behind seq, an
// event this process appended: on a cluster a replica that lags may answer
// a read. A few tries, then the read as it is.
func (a *Aggregate[R]) currentSince(ctx context.Context, ref Ref, seq uint64) (Version[R], error) {
	for try := 1; ; try++ {
		v, err := a.Current(ctx, ref)
		if err != nil || v.Rec != nil && a.k.Seq(v.Rec) >= seq || try == currentTries {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, nil
		case <-time.After(time.Duration(try) * 20 * time.Millisecond):
		}
	}
}

// currentTries bounds currentSince's reads.
const currentTries = 5

// appendAsync appends ev to subject on the condition that the last event
// on subject (or on expectOn, if set) is expect (0: none yet).
func (s *Store) appendAsync(subject string, ev *domain.Event, expect uint64, expectOn string) streams.Future {
	if expectOn == "" {
		return s.w.AppendAsync(subject, ev, expect)
	}
	m, err := streams.EventMsg(subject, ev)
	if err != nil {
		return streams.FailedFuture(err)
	}
	return s.w.AppendMsgAsync(m, expect, expectOn)
}

// follow calls fn with every record of the bucket, then with every change,
// for as long as the store's connection lives (a watch, started again
// when NATS comes back); ready is called once the records there were at
// the start were read (or the connection closed first).
func (a *Aggregate[R]) follow(ready func(), fn func(rec *R)) {
	synced := false
	for !a.s.nc.IsClosed() {
		w, err := a.kv.WatchAll(context.Background(), jetstream.IgnoreDeletes())
		if err != nil {
			time.Sleep(time.Second) // NATS is away: watch again when it is back
			continue
		}
		for e := range w.Updates() {
			if e == nil {
				if !synced {
					synced = true
					ready()
				}
				continue
			}
			if rec, err := a.k.Decode(e.Value()); err == nil {
				fn(rec)
			}
		}
		_ = w.Stop()
	}
	if !synced {
		ready()
	}
}

// All reads every record of the bucket once, as the bucket has it now.
func (a *Aggregate[R]) All(ctx context.Context) ([]*R, error) {
	var out []*R
	err := scan(ctx, a.kv, func(e jetstream.KeyValueEntry) {
		if rec, err := a.k.Decode(e.Value()); err == nil {
			out = append(out, rec)
		}
	})
	return out, err
}
