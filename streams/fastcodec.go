package streams

import (
	"encoding/binary"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/internal/domain"
)

// The encoders of the hot path's records: a job (its record, and inside a
// work item) and an event. Every transition writes both, so their encoding
// runs several times per job. msgpack's reflection does the same work, but
// for each omitempty field it boxes the value to ask whether it is empty (an
// allocation per field, and most of the encoding's time; docs/architecture.md,
// "Performance, and what bounds it").
//
// These write exactly the bytes msgpack's reflection writes for the same
// struct: the same keys, in the struct's order, with the same omissions and
// the same number forms (TestFastCodecIsReflection checks every field of
// each type, filled at random, against the reflection's bytes: a field added
// to a struct and not here fails it). Decoding is msgpack's own: a
// hand-written decoder measured barely faster (BenchmarkDecodeJob).

// mapWriter writes a map's fields. body runs twice: once counting the fields
// it would write (count set), then writing them after the map's header, so
// that the rule that omits a field is written once.
type mapWriter struct {
	e     *msgpack.Encoder
	count bool
	n     int
	err   error
}

func writeMap(e *msgpack.Encoder, body func(w *mapWriter)) error {
	c := mapWriter{count: true}
	body(&c)
	if err := e.EncodeMapLen(c.n); err != nil {
		return err
	}
	w := mapWriter{e: e}
	body(&w)
	return w.err
}

// key counts the field, or writes its key; false: write nothing more.
func (w *mapWriter) key(k string) bool {
	if w.count {
		w.n++
		return false
	}
	if w.err != nil {
		return false
	}
	w.err = w.e.EncodeString(k)
	return w.err == nil
}

func (w *mapWriter) set(err error) {
	if w.err == nil {
		w.err = err
	}
}

// put writes field k, valued v, with enc, if write (false: the field is
// omitted, as omitempty omits an empty value).
func put[T any](w *mapWriter, k string, v T, write bool, enc func(*msgpack.Encoder, T) error) {
	if write && w.key(k) {
		w.set(enc(w.e, v))
	}
}

// The fields by type, in the forms msgpack's reflection writes them: an
// int in its smallest form, an int64 (time.Duration) and a uint64 in
// their 9-byte forms.
func (w *mapWriter) str(k, v string)         { put(w, k, v, true, (*msgpack.Encoder).EncodeString) }
func (w *mapWriter) strOmit(k, v string)     { put(w, k, v, v != "", (*msgpack.Encoder).EncodeString) }
func (w *mapWriter) integer(k string, v int) { put(w, k, int64(v), true, (*msgpack.Encoder).EncodeInt) }
func (w *mapWriter) intOmit(k string, v int) {
	put(w, k, int64(v), v != 0, (*msgpack.Encoder).EncodeInt)
}
func (w *mapWriter) int64Field(k string, v int64) { put(w, k, v, true, (*msgpack.Encoder).EncodeInt64) }
func (w *mapWriter) int64Omit(k string, v int64) {
	put(w, k, v, v != 0, (*msgpack.Encoder).EncodeInt64)
}
func (w *mapWriter) uint64Field(k string, v uint64) {
	put(w, k, v, true, (*msgpack.Encoder).EncodeUint64)
}
func (w *mapWriter) uint64Omit(k string, v uint64) {
	put(w, k, v, v != 0, (*msgpack.Encoder).EncodeUint64)
}
func (w *mapWriter) boolOmit(k string, v bool) { put(w, k, v, v, (*msgpack.Encoder).EncodeBool) }
func (w *mapWriter) float(k string, v float64) { put(w, k, v, true, (*msgpack.Encoder).EncodeFloat64) }
func (w *mapWriter) bytesOmit(k string, v []byte) {
	put(w, k, v, len(v) > 0, (*msgpack.Encoder).EncodeBytes)
}
func (w *mapWriter) timeField(k string, v time.Time) {
	put(w, k, v, true, (*msgpack.Encoder).EncodeTime)
}
func (w *mapWriter) timeOmit(k string, v time.Time) {
	put(w, k, v, !v.IsZero(), (*msgpack.Encoder).EncodeTime)
}

// opt writes a field msgpack's reflection encodes (rare fields: nested
// structs, slices, maps), if write (false: omitted). v becomes an
// interface only when it is written.
func opt[T any](w *mapWriter, k string, write bool, v T) {
	if write && w.key(k) {
		w.set(w.e.Encode(v))
	}
}

func (w *mapWriter) spec(k string, s *domain.Spec) {
	if w.key(k) {
		w.set(encodeSpec(w.e, s))
	}
}

// encodeFast encodes the types this file knows; ok false for any other.
func encodeFast(e *msgpack.Encoder, v any) (ok bool, err error) {
	switch v := v.(type) {
	case *domain.Job:
		if v == nil {
			return true, e.EncodeNil()
		}
		return true, encodeJob(e, v)
	case *domain.Event:
		if v == nil {
			return true, e.EncodeNil()
		}
		return true, encodeEvent(e, v)
	case *domain.WorkItem:
		if v == nil {
			return true, e.EncodeNil()
		}
		return true, writeMap(e, func(w *mapWriter) {
			w.uint64Field("rev", v.Rev)
			if w.key("job") {
				w.set(encodeJob(w.e, &v.Job))
			}
		})
	}
	return false, nil
}

// workItemOf is the encoding of the work item {rev, job} whose job is
// encoded already as record (EncodeJob): the bytes Marshal writes for it,
// without encoding the job again.
func workItemOf(rev uint64, record []byte) []byte {
	const head = 1 + 4 + 9 + 4 // fixmap(2), "rev", uint64, "job"
	out := make([]byte, 0, head+len(record))
	out = append(out, 0x82, 0xa3, 'r', 'e', 'v', 0xcf)
	out = binary.BigEndian.AppendUint64(out, rev)
	out = append(out, 0xa3, 'j', 'o', 'b')
	return append(out, record...)
}

func encodeJob(e *msgpack.Encoder, j *domain.Job) error {
	return writeMap(e, func(w *mapWriter) {
		w.str("id", j.ID)
		w.spec("spec", &j.Spec)
		w.str("state", string(j.State))
		w.integer("attempt", j.Attempt)
		w.integer("retries", j.Retries)
		w.integer("lease_requeues", j.LeaseRequeues)
		w.strOmit("worker", j.Worker)
		w.uint64Omit("lease_item", j.LeaseItem)
		w.strOmit("lease_ack", j.LeaseAck)
		w.bytesOmit("result", j.Result)
		opt(w, "result_ref", j.ResultRef != nil, j.ResultRef)
		opt(w, "error", j.Error != nil, j.Error)
		opt(w, "progress", j.Progress != nil, j.Progress)
		opt(w, "fanout", j.Fanout != nil, j.Fanout)
		w.timeField("created_at", j.CreatedAt)
		w.timeOmit("run_at", j.RunAt)
		w.timeOmit("queued_at", j.QueuedAt)
		w.timeOmit("started_at", j.StartedAt)
		w.timeOmit("finished_at", j.FinishedAt)
		w.timeField("updated_at", j.UpdatedAt)
		w.uint64Field("seq", j.Seq)
		w.integer("events", j.Events)
		w.bytesOmit("last_hash", j.LastHash)
		w.timeOmit("purged_at", j.PurgedAt)
		opt(w, "hold", j.Hold != nil, j.Hold)
		w.timeOmit("claimed_at", j.ClaimedAt)
		w.strOmit("attempt_trace", j.AttemptTrace)
		w.strOmit("prev_attempt_trace", j.PrevAttemptTrace)
		w.intOmit("dups", j.Duplicates)
	})
}

func encodeSpec(e *msgpack.Encoder, s *domain.Spec) error {
	return writeMap(e, func(w *mapWriter) {
		w.str("ns", s.Namespace)
		w.str("type", s.Type)
		w.str("queue", s.Queue)
		w.bytesOmit("payload", s.Payload)
		opt(w, "tags", len(s.Tags) > 0, s.Tags)
		w.strOmit("key", s.Key)
		w.strOmit("parent", s.Parent)
		w.strOmit("retry_of", s.RetryOf)
		w.boolOmit("failed_pieces", s.FailedPieces)
		w.intOmit("prio", s.Priority)
		w.integer("max_retries", s.MaxRetries)
		w.int64Field("backoff", int64(s.Backoff))
		w.int64Field("backoff_cap", int64(s.BackoffCap))
		w.float("jitter", s.Jitter)
		opt(w, "retry_on", len(s.RetryOn) > 0, s.RetryOn)
		opt(w, "no_retry_on", len(s.NoRetryOn) > 0, s.NoRetryOn)
		w.int64Field("timeout", int64(s.Timeout))
		w.integer("max_lease_requeues", s.MaxLeaseRequeues)
		w.timeOmit("run_at", s.RunAt)
		w.intOmit("piece", s.Piece)
		w.int64Omit("queue_timeout", int64(s.QueueTimeout))
		opt(w, "files", len(s.Files) > 0, s.Files)
		w.strOmit("user", s.User)
		if s.Workflow != nil && w.key("workflow") {
			w.set(encodeWorkflow(w.e, s.Workflow))
		}
		if s.Step != nil && w.key("step") {
			w.set(encodeStepSpec(w.e, s.Step))
		}
		w.strOmit("ckey", s.ConcurrencyKey)
		w.strOmit("traceparent", s.TraceParent)
		w.strOmit("tracestate", s.TraceState)
		opt(w, "unique", s.Unique != nil, s.Unique)
	})
}

func encodeEvent(e *msgpack.Encoder, ev *domain.Event) error {
	return writeMap(e, func(w *mapWriter) {
		w.integer("v", ev.V)
		w.str("type", ev.Type)
		w.str("job", ev.JobID)
		w.timeField("time", ev.Time)
		w.intOmit("attempt", ev.Attempt)
		w.strOmit("actor", ev.Actor)
		w.strOmit("level", ev.Level)
		w.strOmit("name", ev.Name)
		w.strOmit("msg", ev.Message)
		opt(w, "fields", len(ev.Fields) > 0, ev.Fields)
		w.strOmit("from", string(ev.From))
		w.strOmit("to", string(ev.To))
		if ev.Spec != nil {
			w.spec("spec", ev.Spec)
		}
		w.bytesOmit("result", ev.Result)
		opt(w, "result_ref", ev.ResultRef != nil, ev.ResultRef)
		opt(w, "error", ev.Error != nil, ev.Error)
		w.timeOmit("run_at", ev.RunAt)
		w.uint64Omit("lease", ev.Lease)
		w.strOmit("lease_ack", ev.LeaseAck)
		opt(w, "progress", ev.Progress != nil, ev.Progress)
		opt(w, "plan", ev.Plan != nil, ev.Plan)
		opt(w, "counts", ev.Counts != nil, ev.Counts)
		w.intOmit("piece", ev.Piece)
		w.strOmit("trace", ev.Trace)
		opt(w, "typedef", ev.TypeDef != nil, ev.TypeDef)
		opt(w, "ns", ev.Namespace != nil, ev.Namespace)
		opt(w, "token", ev.Token != nil, ev.Token)
		opt(w, "queue", ev.Queue != nil, ev.Queue)
		opt(w, "hold", ev.Hold != nil, ev.Hold)
		if len(ev.Steps) > 0 && w.key("steps") {
			w.set(w.e.EncodeArrayLen(len(ev.Steps)))
			for i := range ev.Steps {
				w.set(encodeSpec(w.e, &ev.Steps[i]))
			}
		}
		opt(w, "sched", ev.Schedule != nil, ev.Schedule)
		w.strOmit("rate_key", ev.RateKey)
		opt(w, "priority", ev.Priority != nil, ev.Priority)
		w.strOmit("by", ev.By)
		opt(w, "ckpt", ev.Checkpoint != nil, ev.Checkpoint)
		w.bytesOmit("prev", ev.Prev)
	})
}

// encodeWorkflow encodes a workflow's graph (in its record, written with
// its counts a few times a second: up to 10,000 steps).
func encodeWorkflow(e *msgpack.Encoder, g *domain.Workflow) error {
	return writeMap(e, func(w *mapWriter) {
		w.strOmit("name", g.Name)
		w.str("on_failure", g.OnFailure)
		if !w.key("steps") {
			return
		}
		if g.Steps == nil {
			w.set(w.e.EncodeNil())
			return
		}
		w.set(w.e.EncodeArrayLen(len(g.Steps)))
		for i := range g.Steps {
			st := &g.Steps[i]
			w.set(writeMap(w.e, func(w *mapWriter) {
				w.str("name", st.Name)
				if len(st.After) > 0 && w.key("after") {
					w.set(w.e.EncodeArrayLen(len(st.After)))
					for _, a := range st.After {
						w.set(w.e.EncodeInt(int64(a)))
					}
				}
				w.strOmit("on_failure", st.OnFailure)
				w.strOmit("carried", st.Carried)
			}))
		}
	})
}

// encodeStepSpec encodes a step's place in its workflow (in each step's
// record and events).
func encodeStepSpec(e *msgpack.Encoder, st *domain.StepSpec) error {
	return writeMap(e, func(w *mapWriter) {
		w.str("name", st.Name)
		if len(st.Inputs) > 0 && w.key("inputs") {
			w.set(w.e.EncodeArrayLen(len(st.Inputs)))
			for _, in := range st.Inputs {
				w.set(writeMap(w.e, func(w *mapWriter) {
					w.str("name", in.Name)
					w.str("job", in.Job)
				}))
			}
		}
	})
}
