package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
)

// readBody reads a request body of at most limit bytes. A larger one is a
// payload-too-large problem, and what is left of it is drained first
// (drainBody), so that a client that sends its whole request before it
// reads the answer reads the 413 rather than a connection reset.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		// A client that waits for "100 Continue" has sent nothing: it is
		// answered at once, and does not send the body.
		if !strings.EqualFold(r.Header.Get("Expect"), "100-continue") && r.ContentLength <= drainLimit(limit) {
			drainBody(w, r.Body, drainLimit(limit))
		}
		w.Header().Set("Connection", "close")
		return nil, newProblem(problemPayloadTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("body of %d bytes is over the limit of %d", r.ContentLength, limit))
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		drainBody(w, r.Body, drainLimit(limit))
		w.Header().Set("Connection", "close")
		return nil, newProblem(problemPayloadTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("body is over the limit of %d bytes", limit))
	}
	if err != nil {
		return nil, newProblem(problemMalformedRequest, http.StatusBadRequest, "reading the body: "+err.Error())
	}
	return b, nil
}

// Bounds of draining a refused body.
const (
	drainTime = 5 * time.Second
	// minDrain and maxDrain bound the bytes drained: 4 times the body
	// limit, at least minDrain, at most maxDrain.
	minDrain = 4 << 20
	maxDrain = 32 << 20
)

func drainLimit(limit int64) int64 { return min(max(4*limit, minDrain), maxDrain) }

// drainBody reads and discards what is left of a refused body, at most n
// bytes for at most drainTime. net/http itself discards at most 256 KiB of
// a body the handler left unread, then closes the connection while the
// client may still be sending: the client's next write is answered with a
// reset, and a client that reads only after it has written everything
// (Python's urllib and requests) loses the answer that was waiting in its
// receive buffer. Once the body is drained, closing the connection (the
// answer says Connection: close) sends the answer and a FIN, no reset.
func drainBody(w http.ResponseWriter, body io.Reader, n int64) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(drainTime))
	_, _ = io.CopyN(io.Discard, body, n)
	_ = rc.SetReadDeadline(time.Time{})
}

// decodeStrict decodes one JSON object into v: unknown fields, fields of the
// wrong type, trailing data and an empty body are malformed-request
// problems. With optional, an empty body leaves v as it is.
func decodeStrict(body []byte, v any, optional bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return newProblem(problemMalformedRequest, http.StatusBadRequest, "the body is empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return undecodable(body, v, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return newProblem(problemMalformedRequest, http.StatusBadRequest, "body: trailing data after the JSON object")
	}
	return nil
}

// undecodable is the problem of a body that does not decode into v: a
// value refused where it is decoded (a duration out of range) is
// invalid-input naming its field; anything else is malformed-request,
// naming the field whose value does not decode when one does not.
func undecodable(body []byte, v any, err error) error {
	field, ferr := engine.FieldOf(body, true, v)
	var in *commands.InputError
	if errors.As(ferr, &in) || errors.As(err, &in) {
		named := *in
		if field != "" {
			named.Field = field
		}
		return &named
	}
	p := newProblem(problemMalformedRequest, http.StatusBadRequest, "body: "+jsonErrorDetail(err))
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te) && te.Field != "":
		p.Field = te.Field
	case field != "":
		p.Field = field
		p.Detail = fmt.Sprintf("body: field %q: %v", field, ferr)
	}
	return p
}

func jsonErrorDetail(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %q: want %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("not valid JSON at byte %d: %v", se.Offset, err)
	}
	return err.Error()
}

// decodeSubmit decodes the body of POST /jobs: a commands.SubmitRequest
// (durations as "30s" or seconds), strictly, and checks it without
// writing anything (commands.SubmitRequest.Spec).
func decodeSubmit(body []byte) (*commands.SubmitRequest, error) {
	var req commands.SubmitRequest
	if err := decodeStrict(body, &req, false); err != nil {
		return nil, err
	}
	if err := commands.CheckGivenNamespace(body, true); err != nil {
		return nil, err
	}
	if _, err := req.Spec(time.Now()); err != nil {
		return nil, err
	}
	return &req, nil
}

// patchRequest is the body of PATCH /jobs/{id}: a report of the worker
// that claimed the job.
type patchRequest struct {
	WorkerID  string           `json:"worker_id"`
	State     domain.State     `json:"state,omitempty"`
	Progress  *domain.Progress `json:"progress,omitempty"`
	Result    commands.RawJSON `json:"result,omitempty"`
	Error     *domain.JobError `json:"error,omitempty"`
	Retryable *bool            `json:"retryable,omitempty"`
	Reason    string           `json:"reason,omitempty"` // state "queued" or "retry_later": why
	// Delay is how long a job given back with state "retry_later" waits.
	Delay *commands.Duration `json:"delay,omitempty"`
	// Event is a handler's own event (job.event).
	Event *eventBody `json:"event,omitempty"`
	// Fanout is what a job reported "waiting" waits for.
	Fanout *fanoutBody `json:"fanout,omitempty"`
}

// decodePatch decodes and checks a PATCH /jobs/{id} body.
func decodePatch(body []byte) (*patchRequest, error) {
	var p patchRequest
	if err := decodeStrict(body, &p, false); err != nil {
		return nil, err
	}
	return &p, p.validate()
}

// shape is which of the report's fields p gives.
func (p *patchRequest) shape() commands.ReportShape {
	return commands.ReportShape{State: p.State, Result: len(p.Result) > 0, Error: p.Error != nil,
		ErrorText: p.Error != nil && p.Error.Message != "", Retryable: p.Retryable != nil, Reason: p.Reason != "",
		Delay: (*time.Duration)(p.Delay), Fanout: p.Fanout != nil}
}

func (p *patchRequest) validate() error {
	in := func(field, format string, args ...any) error {
		return &commands.InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if p.WorkerID == "" {
		return in("worker_id", "is required")
	}
	if p.State == "" && p.Progress == nil && p.Event == nil {
		return in("state", `give a state ("running", "succeeded", "failed", "queued", "retry_later", "waiting"), a progress or an event`)
	}
	if p.State != "" && !commands.StateWord(p.State) {
		return in("state", "%q is not a state", p.State)
	}
	if err := p.validateMore(); err != nil {
		return err
	}
	if err := p.shape().CheckFields(); err != nil {
		return err
	}
	if err := commands.CheckReason("reason", p.Reason); err != nil {
		return err
	}
	if err := p.shape().CheckFailure(); err != nil {
		return err
	}
	if e := p.Error; e != nil && (len(e.Code) > 128 || len(e.Message) > 64<<10 || len(e.Stack) > 256<<10) {
		return in("error", "code over 128 bytes, message over 64 KiB or stack over 256 KiB")
	}
	if pr := p.Progress; pr != nil {
		return commands.CheckProgress(pr.Current, pr.Total, pr.Message)
	}
	return nil
}

// claimRequest is the body of POST /tasks/claim.
type claimRequest struct {
	WorkerID string             `json:"worker_id"`
	Wait     *commands.Duration `json:"wait,omitempty"` // seconds (or "10s") to wait for a job; default 0
}

// decodeClaim decodes and checks a POST /tasks/claim body.
func decodeClaim(body []byte) (*claimRequest, error) {
	var c claimRequest
	if err := decodeStrict(body, &c, false); err != nil {
		return nil, err
	}
	if c.WorkerID == "" {
		return nil, &commands.InputError{Field: "worker_id", Reason: "is required"}
	}
	if c.Wait != nil && *c.Wait < 0 {
		return nil, &commands.InputError{Field: "wait", Value: time.Duration(*c.Wait).String(), Reason: "must not be negative"}
	}
	return &c, nil
}

// RegisterRequest is the body of POST /workers.
type RegisterRequest struct {
	Name string `json:"name"`
	// Namespace is the worker's: its category:name types are registered
	// there (default "default").
	Namespace string `json:"namespace,omitempty"`
	// NamespaceGiven: the body named the namespace (else it is the default,
	// or, with access control, the token's).
	NamespaceGiven bool `json:"-"`
	// Types are the job types it runs: free-form ones (demo.echo), full
	// names (scope:category:name, in its namespace or @global) and
	// category:name (in its namespace); after registration, full names.
	Types []string `json:"types"`
	// Schemas are the JSON Schemas that came with types, by the name given.
	Schemas     map[string]json.RawMessage `json:"-"`
	Queues      []string                   `json:"queues,omitempty"`
	Concurrency int                        `json:"concurrency,omitempty"` // 1-maxWorkerConcurrency; not given: 1
	// BatchTypes are the batch types it runs (batches of fan-outs).
	BatchTypes []string `json:"batch_types,omitempty"`
}

// typeEntry is one of a registration's types: a name, or {"name",
// "schema"}.
type typeEntry struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema,omitempty"`
}

// UnmarshalJSON reads a name or an object.
func (t *typeEntry) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &t.Name)
	}
	type plain typeEntry
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf(`a type is a name or {"name", "schema"}: %w`, err)
	}
	*t = typeEntry(p)
	return nil
}

// registerBody is RegisterRequest as it arrives: a concurrency that is not
// given is the default, one that is given is taken or refused.
type registerBody struct {
	Name        string      `json:"name"`
	Namespace   *string     `json:"namespace,omitempty"`
	Types       []typeEntry `json:"types"`
	Queues      []string    `json:"queues,omitempty"`
	Concurrency *int        `json:"concurrency,omitempty"`
	BatchTypes  []string    `json:"batch_types,omitempty"`
}

// Bounds of a remote worker's concurrency.
const (
	defaultWorkerConcurrency = 1
	maxWorkerConcurrency     = 10000
)

// decodeRegister decodes and checks a POST /workers body.
func decodeRegister(body []byte) (*RegisterRequest, error) {
	var b registerBody
	if err := decodeStrict(body, &b, false); err != nil {
		return nil, err
	}
	req := RegisterRequest{Name: b.Name, NamespaceGiven: b.Namespace != nil, Queues: b.Queues,
		Concurrency: defaultWorkerConcurrency}
	if b.Namespace != nil {
		// Given, it is taken as it is: "" is no namespace (refused), not
		// the default that a namespace left out is.
		req.Namespace = *b.Namespace
		if err := commands.CheckNamespace(req.Namespace); err != nil {
			return nil, err
		}
	}
	in := func(field, format string, args ...any) error {
		return &commands.InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if len(req.Name) > 128 {
		return nil, in("name", "longer than 128 bytes")
	}
	if req.Namespace == "" {
		req.Namespace = domain.DefaultNS
	}
	if err := commands.CheckNamespace(req.Namespace); err != nil {
		return nil, err
	}
	if len(b.Types) == 0 && len(b.BatchTypes) == 0 {
		return nil, in("types", "a worker needs at least one job type or batch type")
	}
	for _, t := range b.BatchTypes {
		if !domain.ValidType(t) || strings.HasPrefix(t, commands.ScopeInternal+":") {
			return nil, in("batch_types", "%q is not a batch type", t)
		}
	}
	req.BatchTypes = dedupe(b.BatchTypes)
	for i, t := range b.Types {
		if !domain.ValidType(t.Name) {
			return nil, in("types", "%q is not a job type", t.Name)
		}
		if slices.ContainsFunc(b.Types[:i], func(o typeEntry) bool { return o.Name == t.Name && !sameSchema(o.Schema, t.Schema) }) {
			return nil, in("types", "%q is listed twice with two schemas", t.Name)
		}
		if commands.Registered(t.Name) {
			if _, err := commands.Candidates(req.Namespace, t.Name); err != nil {
				return nil, err
			}
			if strings.HasPrefix(t.Name, commands.ScopeInternal+":") {
				return nil, fmt.Errorf("type %s: @internal types are run by the engine itself, never by a remote worker: %w",
					t.Name, commands.ErrInternalType)
			}
		} else if len(t.Schema) > 0 {
			return nil, in("types", "%q is free-form (no ':'): only registered types (category:name) have a schema", t.Name)
		}
		req.Types = append(req.Types, t.Name)
		if len(t.Schema) > 0 {
			if req.Schemas == nil {
				req.Schemas = map[string]json.RawMessage{}
			}
			req.Schemas[t.Name] = t.Schema
		}
	}
	if req.Queues != nil && len(req.Queues) == 0 {
		return nil, in("queues", `an empty list: name at least one queue, or leave "queues" out to serve every queue`)
	}
	for _, q := range req.Queues {
		if !domain.ValidQueue(q) {
			return nil, in("queues", "%q is not a queue name", q)
		}
	}
	req.Types, req.Queues = dedupe(req.Types), dedupe(req.Queues)
	// Every (queue, type) pair is a consumer on the server that the
	// worker's first claim creates: a registration is bounded.
	if err := engine.CheckRemoteScope(req.Queues, append(slices.Clip(req.Types), req.BatchTypes...)); err != nil {
		p := newProblem(problemRegistrationTooLarge, http.StatusUnprocessableEntity, err.Error())
		p.Field = "types"
		if len(req.Queues) > engine.MaxRemoteQueues {
			p.Field = "queues"
		}
		return nil, p
	}
	if c := b.Concurrency; c != nil {
		if *c < 1 || *c > maxWorkerConcurrency {
			return nil, &commands.InputError{Field: "concurrency", Value: fmt.Sprint(*c),
				Reason: fmt.Sprintf("must be 1-%d", maxWorkerConcurrency)}
		}
		req.Concurrency = *c
	}
	return &req, nil
}

// queueLimitsRequest is the body of PUT /queues/{queue}: the limits to
// change (null or left out: kept as they are; 0: no limit).
type queueLimitsRequest = commands.QueueLimitsChange

// decodeQueueLimits decodes a PUT /queues/{queue} body strictly and checks
// each limit it gives (commands.CheckLimits: counts 0 to
// commands.MaxLimit, a rate period and a rate key); that a rate limit has
// its period is checked on the queue's limits with the change.
func decodeQueueLimits(body []byte) (*queueLimitsRequest, error) {
	var q queueLimitsRequest
	if err := decodeStrict(body, &q, false); err != nil {
		return nil, err
	}
	if err := q.Check(); err != nil {
		return nil, err
	}
	return &q, nil
}

// cancelRequest is the optional body of POST /jobs/{id}/cancel.
type cancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// retryRequest is the optional body of POST /jobs/{id}/retry.
type retryRequest struct {
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// FailedPieces: run again only a fan-out's pieces that did not
	// succeed (the others are carried over).
	FailedPieces bool `json:"failed_pieces,omitempty"`
}

// priorityRequest is the body of POST /jobs/{id}/priority.
type priorityRequest struct {
	Priority *int `json:"priority"`
}

// dedupe drops repeated names, keeping the first of each in order.
func dedupe(names []string) []string {
	seen := make(map[string]bool, len(names))
	out := names[:0:0]
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// readJSON reads a request body within the gateway's size limit and
// decodes it strictly into v; optional allows an empty body.
func (g *Gateway) readJSON(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	body, err := readBody(w, r, g.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	return decodeStrict(body, v, optional)
}

// sameSchema reports whether two schemas a worker sent for one type agree:
// the same once canonical, or one of them left out (no opinion). An invalid
// one is refused later, where schemas are checked.
func sameSchema(a, b json.RawMessage) bool {
	ca, errA := engine.CanonicalSchema(a)
	cb, errB := engine.CanonicalSchema(b)
	return errA != nil || errB != nil || len(ca) == 0 || len(cb) == 0 || bytes.Equal(ca, cb)
}
