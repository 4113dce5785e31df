package cmdservice

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/audit"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// The audit of the event log beyond the CLI (docs/audit.md): audit_verify
// (the chain and the checkpoints of a scope) and audit_pubkey (the key
// that signs the checkpoints). The HTTP API's /api/v1/audit routes and the
// Go client read their requests and decide their access here too.

// AuditFields are a verification of the log as a client asks for it: the
// body of audit_verify, the query of GET /api/v1/audit/verify. Since and
// Until are RFC 3339; Pubkey the trusted checkpoint keys, comma-separated.
type AuditFields struct {
	Job       string `json:"job,omitempty" msgpack:"job,omitempty"`
	Namespace string `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Queue     string `json:"queue,omitempty" msgpack:"queue,omitempty"`
	Type      string `json:"type,omitempty" msgpack:"type,omitempty"`
	Since     string `json:"since,omitempty" msgpack:"since,omitempty"`
	Until     string `json:"until,omitempty" msgpack:"until,omitempty"`
	Pubkey    string `json:"pubkey,omitempty" msgpack:"pubkey,omitempty"`
}

// AuditRequest is a verification of the log, read and checked: the
// events of Scope the log stored from Since to Until (zero: no bound),
// checked against Pubkey ("": the key each checkpoint names).
type AuditRequest struct {
	Scope        audit.Scope
	Since, Until time.Time
	Pubkey       string
}

// Request reads and checks the fields: an InputError names the first one
// refused.
func (f AuditFields) Request() (AuditRequest, error) {
	sc, err := scopeFields{Job: f.Job, Namespace: f.Namespace, Queue: f.Queue, Type: f.Type, Since: f.Since, Until: f.Until}.scope()
	if err != nil {
		return AuditRequest{}, err
	}
	if err := audit.CheckPubkeys("pubkey", f.Pubkey); err != nil {
		return AuditRequest{}, err
	}
	return AuditRequest{Scope: audit.Scope{Job: sc.Job, Namespace: sc.Namespace, Queue: sc.Queue, Type: sc.Type},
		Since: sc.Since, Until: sc.Until, Pubkey: f.Pubkey}, nil
}

// Authorize holds r to what p may verify (commands.Principal's
// AuditNamespace): a namespaced principal's scope is its namespace (naming
// another is forbidden), and a job it names must have an event on its
// namespace's subjects, else it is not found, exactly as a job no one has
// (the job's piece events are on a subject that names no namespace). The
// job is looked up in the log, not its record: a purged job is still
// audited, and a log tampered with still answers. A principal of every
// namespace needs the admin role. A nil principal (access control off)
// verifies what it asks.
func (r *AuditRequest) Authorize(ctx context.Context, js jetstream.JetStream, p *commands.Principal) error {
	ns, err := p.AuditNamespace(r.Scope.Namespace)
	if err != nil {
		return err
	}
	r.Scope.Namespace = ns
	if r.Scope.Job == "" || !p.Scoped() {
		return nil
	}
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return fmt.Errorf("events stream: %w", err)
	}
	_, err = s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(streams.EventsFilter(ns, "", "", r.Scope.Job)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("job %s: %w", r.Scope.Job, commands.ErrNotFound)
	}
	return err
}

// Verify verifies the request's part of the log (audit.VerifyRange); the
// report's findings are a list, empty when there is none.
func (r AuditRequest) Verify(ctx context.Context, js jetstream.JetStream) (*audit.Report, error) {
	rep, err := audit.VerifyRange(ctx, js, r.Scope, r.Since, r.Until, r.Pubkey)
	if err != nil {
		return nil, err
	}
	if rep.Findings == nil {
		rep.Findings = []audit.Finding{}
	}
	return rep, nil
}

// auditVerifyReply is what audit_verify answers: the report, its findings
// cut to fit the reply, and how many were left out.
type auditVerifyReply struct {
	Report           *audit.Report `json:"report"`
	FindingsNotShown int           `json:"findings_not_shown,omitempty"`
}

// auditVerify: audit_verify (jetflow audit verify, GET /audit/verify).
func (c *CommandServer) auditVerify(k *call) *cmdReply {
	var f AuditFields
	if r := k.decode(&f); r != nil {
		return r
	}
	req, err := f.Request()
	if err != nil {
		return fail(err, "")
	}
	if err := req.Authorize(k.ctx, c.store.JS(), k.p); err != nil {
		return fail(err, req.Scope.Job)
	}
	ctx, done, r := c.rebuild(k)
	if r != nil {
		return r
	}
	defer done()
	rep, err := req.Verify(ctx, c.store.JS())
	if err != nil {
		return fail(err, "")
	}
	out := &auditVerifyReply{Report: rep}
	total := 0
	for i, fd := range rep.Findings {
		size := sizeOf(fd)
		if !fits(i, total, size+1024) {
			out.FindingsNotShown = len(rep.Findings) - i
			rep.Findings = rep.Findings[:i]
			break
		}
		total += size
	}
	return &cmdReply{Body: out}
}

// AuditKey is the checkpoint signing key a client is told (audit_pubkey,
// GET /api/v1/audit/pubkey): the key of the engine that answers, or the
// key the log's newest checkpoint names (Checkpoint: its sequence), which
// is what the log claims and proves nothing by itself.
type AuditKey struct {
	PublicKey  string `json:"pubkey"`
	Source     string `json:"source"`
	Checkpoint uint64 `json:"checkpoint_seq,omitempty"`
}

// Sources of an AuditKey.
const (
	KeyOfEngine     = "engine"
	KeyOfCheckpoint = "checkpoint"
)

// AuditKeyOf is own (the public key this process signs checkpoints with,
// "": none), else the key the log's newest checkpoint names; when there is
// neither, commands.ErrNotFound.
func AuditKeyOf(ctx context.Context, js jetstream.JetStream, own string) (*AuditKey, error) {
	if own != "" {
		return &AuditKey{PublicKey: own, Source: KeyOfEngine}, nil
	}
	key, seq, err := audit.NewestKey(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("no checkpoint key: this process signs no checkpoints (serve --audit-dir), and %w", err)
	}
	return &AuditKey{PublicKey: key, Source: KeyOfCheckpoint, Checkpoint: seq}, nil
}

// auditPubkey: audit_pubkey (GET /audit/pubkey).
func (c *CommandServer) auditPubkey(k *call) *cmdReply {
	if r := k.decode(&emptyCommand{}); r != nil {
		return r
	}
	key, err := AuditKeyOf(k.ctx, c.store.JS(), c.cfg.AuditKey)
	if err != nil {
		return fail(err, "")
	}
	return &cmdReply{Body: key}
}

// AuditExportFields are an export as a client asks for it: the body of
// audit_export, the query of GET /api/v1/audit/export. Since and Until are
// RFC 3339.
type AuditExportFields struct {
	Since     string `json:"since,omitempty" msgpack:"since,omitempty"`
	Until     string `json:"until,omitempty" msgpack:"until,omitempty"`
	Namespace string `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
}

// Scope reads and checks the fields: an InputError names the first one
// refused.
func (f AuditExportFields) Scope() (audit.ExportScope, error) {
	var sc audit.ExportScope
	var err error
	if sc.Since, err = ParseInstant("since", f.Since); err != nil {
		return sc, err
	}
	if sc.Until, err = ParseInstant("until", f.Until); err != nil {
		return sc, err
	}
	if !sc.Since.IsZero() && !sc.Until.IsZero() && sc.Until.Before(sc.Since) {
		return sc, &commands.InputError{Field: "until", Value: f.Until, Reason: "before since"}
	}
	if f.Namespace != "" && !domain.ValidNamespace(f.Namespace) {
		return sc, &commands.InputError{Field: "namespace", Value: fmt.Sprintf("%q", f.Namespace), Reason: "not a namespace name"}
	}
	sc.Namespace = f.Namespace
	return sc, nil
}

// An audit_export streams the export to the request's reply subject in
// chunks of at most ExportChunkBytes, each a message with the header
// ExportChunkHeader (its number, from 1) sent as a request: the caller
// acknowledges it (a reply) before the next is sent, within ExportAckWait,
// or the export stops; an acknowledgement with the header ExportStopHeader
// stops it at once (the caller could not write what it got). The last
// message on the reply subject is the command's ordinary reply (without
// the header): the export's figures, or a problem.
const (
	ExportChunkHeader = "Jetflow-Export-Chunk"
	ExportStopHeader  = "Jetflow-Export-Stop"
	ExportChunkBytes  = 256 << 10
	ExportAckWait     = 30 * time.Second
)

// AuditExportReply is what audit_export answers once the chunks are sent.
type AuditExportReply struct {
	Events      int   `json:"events"`
	Checkpoints int   `json:"checkpoints"`
	Proofs      int   `json:"proofs"`
	Uncovered   int   `json:"uncovered"` // events after the last checkpoint
	Chunks      int   `json:"chunks"`
	Bytes       int64 `json:"bytes"`
}

// auditExport: audit_export (jetflow export, GET /audit/export), with the
// access rules of audit_verify: a namespaced token exports its
// namespace's part of the log; the whole log needs an admin token of
// every namespace.
func (c *CommandServer) auditExport(k *call) *cmdReply {
	var f AuditExportFields
	if r := k.decode(&f); r != nil {
		return r
	}
	// Whose part first, as the HTTP API's namespace check: a namespaced
	// token naming another namespace is forbidden, whatever the name.
	ns, err := k.p.AuditNamespace(f.Namespace)
	if err != nil {
		return fail(err, "")
	}
	f.Namespace = ns
	sc, err := f.Scope()
	if err != nil {
		return fail(err, "")
	}
	if k.reply == "" {
		return fail(&commands.InputError{Field: "reply", Reason: "audit_export sends the export to the request's reply subject: send it as a request"}, "")
	}
	ctx, done, r := takeSlot(k, c.exports, "exports (audit_export)")
	if r != nil {
		return r
	}
	defer done()
	cw := &chunkWriter{ctx: ctx, nc: c.nc, subject: k.reply, buf: make([]byte, 0, ExportChunkBytes)}
	st, err := audit.Export(ctx, c.store.JS(), sc, cw)
	if err == nil {
		err = cw.send()
	}
	if err != nil {
		return fail(err, "")
	}
	return &cmdReply{Body: AuditExportReply{Events: st.Events, Checkpoints: st.Checkpoints, Proofs: st.Proofs, Uncovered: st.Uncovered,
		Chunks: cw.n, Bytes: st.Bytes}}
}

// chunkWriter sends what is written to it as numbered chunks, each
// acknowledged before the next (see ExportChunkHeader).
type chunkWriter struct {
	ctx     context.Context
	nc      *nats.Conn
	subject string
	buf     []byte
	n       int // chunks sent
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		k := min(len(p), ExportChunkBytes-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p, written = p[k:], written+k
		if len(w.buf) == ExportChunkBytes {
			if err := w.send(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// send sends the buffered bytes as the next chunk and waits for its
// acknowledgement.
func (w *chunkWriter) send() error {
	if len(w.buf) == 0 {
		return nil
	}
	w.n++
	m := nats.NewMsg(w.subject)
	m.Header.Set(ExportChunkHeader, strconv.Itoa(w.n))
	m.Data = w.buf
	ctx, cancel := context.WithTimeout(w.ctx, ExportAckWait)
	defer cancel()
	ack, err := w.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return fmt.Errorf("export chunk %d: not acknowledged by the caller: %w", w.n, err)
	}
	if why := ack.Header.Get(ExportStopHeader); why != "" {
		return fmt.Errorf("export chunk %d: the caller stopped the export: %s", w.n, headerText(why))
	}
	w.buf = w.buf[:0]
	return nil
}
