package cmdservice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/audit"
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
	release, r := c.rebuild()
	if r != nil {
		return r
	}
	defer release()
	ctx, cancel := long(k.ctx, MaxRebuild)
	defer cancel()
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
