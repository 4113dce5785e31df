package cmdservice

import (
	"fmt"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// maxTailWait bounds how long one tail command waits for an event.
const maxTailWait = 20 * time.Second

// tailCommand is the body of tail: the events after a sequence (or since a
// time; neither: from now) of a namespace, queue and type ("": any).
type tailCommand struct {
	Namespace string             `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Queue     string             `json:"queue,omitempty" msgpack:"queue,omitempty"`
	Type      string             `json:"type,omitempty" msgpack:"type,omitempty"`
	After     uint64             `json:"after,omitempty" msgpack:"after,omitempty"`
	Since     *time.Time         `json:"since,omitempty" msgpack:"since,omitempty"`
	Limit     int                `json:"limit,omitempty" msgpack:"limit,omitempty"`
	Wait      *commands.Duration `json:"wait,omitempty" msgpack:"wait,omitempty"`
}

// tailReply: the events, each with its job's namespace, queue and type, and
// the sequence to ask after next.
type tailReply struct {
	Events []*projections.EventView `json:"events"`
	Next   uint64                   `json:"next"`
}

// tail answers one poll of a tail: a namespaced principal reads its
// namespace's events only (naming another is forbidden).
func (c *CommandServer) tail(k *call) *cmdReply {
	var req tailCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	ns, err := k.p.Scope(commands.ActRead, req.Namespace)
	if err != nil {
		return fail(err, "")
	}
	f := store.Filter{Namespace: ns, Queue: req.Queue, Type: req.Type}
	if err := f.Validate(); err != nil {
		return fail(err, "")
	}
	if req.Limit < 0 || req.Limit > store.MaxTailBatch {
		return fail(&commands.InputError{Field: "limit", Reason: fmt.Sprintf("%d: want 0 (the most) to %d", req.Limit, store.MaxTailBatch)}, "")
	}
	wait := time.Duration(0)
	if req.Wait != nil {
		wait = min(max(time.Duration(*req.Wait), 0), maxTailWait)
	}
	var since time.Time
	if req.Since != nil {
		since = *req.Since
	}
	evs, next, err := c.store.Tail(k.ctx, streams.EventsFilter(f.Namespace, f.Queue, f.Type, ""), req.After, since, req.Limit, wait)
	if err != nil {
		return fail(err, "")
	}
	out := tailReply{Events: make([]*projections.EventView, 0, len(evs)), Next: next}
	for _, e := range evs {
		out.Events = append(out.Events, projections.ViewTailEvent(e.Event, e.Namespace, e.Queue, e.Type))
	}
	return &cmdReply{Body: out}
}
