package gateway

import (
	"fmt"
	"net/http"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
)

// What an HTTP worker reports beyond a state: a retry later, a handler's
// own event, a fan-out. Each is what the Go SDK's handler does
// (RetryLater, Task.Emit, FanOut), decided by the same rules.

// eventBody is a handler's own event in a report: job.event.
type eventBody struct {
	Name    string         `json:"name"`
	Message string         `json:"message,omitempty"`
	Level   string         `json:"level,omitempty"` // info (default), warning, error
	Fields  map[string]any `json:"fields,omitempty"`
}

// fanoutBody is what a coordinator reported "waiting" waits for: children
// (each a submit as POST /jobs takes it, in the parent's namespace and
// linked to it) or batches, and the failure policy.
type fanoutBody struct {
	Children        []*commands.SubmitRequest `json:"children,omitempty"`
	Batches         *batchesBody              `json:"batches,omitempty"`
	FailurePolicy   string                    `json:"failure_policy,omitempty"` // all (default), fail_fast, tolerate
	MaxFailureRatio *float64                  `json:"max_failure_ratio,omitempty"`
	StallTimeout    *commands.Duration        `json:"stall_timeout,omitempty"`
}

// batchesBody is a fan-out of batches: work items with no job record,
// each run by a worker of its type (a Go batch handler or an HTTP worker
// with batch_types).
type batchesBody struct {
	Type       string             `json:"type"`
	Queue      string             `json:"queue,omitempty"` // default: the parent's
	Items      []commands.RawJSON `json:"items"`
	MaxRetries *int               `json:"max_retries,omitempty"` // default 3
	Backoff    *commands.Duration `json:"backoff,omitempty"`     // default 1s
	Timeout    *commands.Duration `json:"timeout,omitempty"`     // default: the parent's
}

// validateMore checks what goes with the states retry_later and waiting,
// and an event.
func (p *patchRequest) validateMore() error {
	if err := p.shape().CheckDelayAndFanout(); err != nil {
		return err
	}
	if e := p.Event; e != nil {
		if _, err := commands.CheckEvent(e.Name, e.Level, e.Message, e.Fields); err != nil {
			if ie, ok := err.(*commands.InputError); ok {
				named := *ie
				named.Field = "event." + ie.Field
				return &named
			}
			return err
		}
	}
	if p.Fanout != nil {
		_, err := p.Fanout.fanOut()
		return err
	}
	return nil
}

// report is the commands.Report of a PATCH.
func (p *patchRequest) report() commands.Report {
	rep := commands.Report{State: p.State, Result: p.Result, Error: p.Error, Retryable: p.Retryable, Reason: p.Reason}
	if p.Delay != nil {
		rep.Delay = time.Duration(*p.Delay)
	}
	if e := p.Event; e != nil {
		rep.Event = &commands.EventReport{Name: e.Name, Level: e.Level, Message: e.Message, Fields: e.Fields}
	}
	return rep
}

// fanOut is the fan-out a waiting report defers to, as a Go coordinator
// returns it (engine.FanOut). What the plan's rules refuse
// (commands.CheckPlan) is refused when the pieces are made, before anything
// is written; the HTTP body's own rules are checked here: exactly one of
// children or batches, children that name no namespace, parent or
// idempotency key (they are the parent's, or derived), values given that
// would be ignored.
func (b *fanoutBody) fanOut() (*engine.FanOut, error) {
	in := func(field, format string, args ...any) error {
		return &commands.InputError{Field: "fanout." + field, Reason: fmt.Sprintf(format, args...)}
	}
	if (len(b.Children) > 0) == (b.Batches != nil) {
		return nil, in("children", "give children or batches, not both and not neither")
	}
	f := &engine.FanOut{Policy: b.FailurePolicy}
	if b.MaxFailureRatio != nil {
		if b.FailurePolicy != domain.PolicyTolerate {
			return nil, in("max_failure_ratio", `only with failure_policy "tolerate"`)
		}
		f.MaxFailureRatio = *b.MaxFailureRatio
	}
	if b.StallTimeout != nil {
		if *b.StallTimeout <= 0 {
			return nil, in("stall_timeout", "must be more than 0")
		}
		f.StallTimeout = time.Duration(*b.StallTimeout)
	}
	if len(b.Children) > commands.MaxFanout {
		return nil, in("children", "%d children: at most %d", len(b.Children), commands.MaxFanout)
	}
	for i, c := range b.Children {
		field := fmt.Sprintf("children[%d]", i)
		switch {
		case c == nil:
			return nil, in(field, "is null; want a submit")
		case c.Namespace != "":
			return nil, in(field+".namespace", "a child is in its parent's namespace")
		case c.Parent != "":
			return nil, in(field+".parent", "a child's parent is the job that fans out")
		case c.IdempotencyKey != "":
			return nil, in(field+".idempotency_key", "a child's id is derived from its parent's and its place")
		case c.Unique() || c.UniqueFor != nil || c.UniqueWhile != "":
			return nil, in(field+".unique_key", "a child is not unique on its own: its id is derived from its parent's and its place")
		}
	}
	f.Children = b.Children
	if bb := b.Batches; bb != nil {
		if len(bb.Items) == 0 || len(bb.Items) > commands.MaxFanout {
			return nil, in("batches.items", "%d items: want 1 to %d", len(bb.Items), commands.MaxFanout)
		}
		f.BatchType, f.BatchQueue, f.BatchMaxRetries = bb.Type, bb.Queue, bb.MaxRetries
		if bb.Backoff != nil {
			if *bb.Backoff <= 0 {
				return nil, in("batches.backoff", "must be more than 0")
			}
			f.BatchBackoff = time.Duration(*bb.Backoff)
		}
		if bb.Timeout != nil {
			if *bb.Timeout <= 0 {
				return nil, in("batches.timeout", "must be more than 0")
			}
			f.BatchTimeout = time.Duration(*bb.Timeout)
		}
		f.Batches = make([][]byte, len(bb.Items))
		for i, it := range bb.Items {
			f.Batches[i] = it
			if len(it) == 0 {
				f.Batches[i] = []byte("null")
			}
		}
	}
	if err := f.Check(); err != nil {
		// The plan's rules name the Go fields: named here as the body has them.
		if ie, ok := err.(*commands.InputError); ok {
			named := *ie
			named.Field = "fanout." + map[string]string{"batch_type": "batches.type", "batch_queue": "batches.queue",
				"policy": "failure_policy", "max_failure_ratio": "max_failure_ratio"}[ie.Field]
			if named.Field == "fanout." {
				named.Field = "fanout"
			}
			return nil, &named
		}
		return nil, err
	}
	return f, nil
}

// fanOut is the fan-out of a waiting report, its children submitted as
// the request's token submits (POST /jobs): with access control, each runs
// for the token's name unless an admin names another, and a retry_of must
// name a job the token sees.
func (g *Gateway) fanOut(r *http.Request, b *fanoutBody) (*engine.FanOut, error) {
	f, err := b.fanOut()
	if err != nil {
		return nil, err
	}
	for i, c := range f.Children {
		err := submitUser(r, c)
		if err == nil {
			err = g.store.CheckRefs(r.Context(), principal(r), c)
		}
		if err != nil {
			return nil, fmt.Errorf("fanout.children[%d]: %w", i, err)
		}
	}
	return f, nil
}
