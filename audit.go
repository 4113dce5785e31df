package jetflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetflow/jetflow/engine"
)

// The audit of the event log (docs/audit.md): the hash chain of every
// subject and the signed checkpoints, verified on a scope of the log.

// AuditReport is what a verification of the event log found.
type AuditReport struct {
	Events      int // the events read (the scope's and the checkpoints)
	Subjects    int
	Checkpoints int
	// Findings name each thing wrong, by event; none when the log is whole.
	Findings []AuditFinding
	// Covered is the last stream sequence a verified checkpoint covers;
	// Uncovered how many events come after it, not yet committed to by a
	// checkpoint (a whole-log verification only).
	Covered   uint64
	Uncovered int
	// Key is the key the checkpoints were checked against ("": no
	// checkpoint was read); KeyPinned says it was the one given, not the
	// one the log names (which proves nothing against whoever writes it).
	Key       string
	KeyPinned bool
	// FindingsNotShown is how many findings a token client's reply left
	// out (a reply holds 1 MiB at most; the first are shown).
	FindingsNotShown int
}

// OK reports whether nothing was found.
func (r *AuditReport) OK() bool { return len(r.Findings) == 0 && r.FindingsNotShown == 0 }

// AuditFinding is one thing wrong with the log: its kind (AuditEdited,
// ...), the event's subject, job and stream sequence, and what is wrong.
type AuditFinding struct {
	Kind    string
	Subject string
	Job     string
	Seq     uint64
	What    string
}

func (f AuditFinding) String() string {
	job := f.Job
	if job == "" {
		job = "-"
	}
	return fmt.Sprintf("%s seq %d job %s on %s: %s", f.Kind, f.Seq, job, f.Subject, f.What)
}

// Kinds of AuditFinding.
const (
	AuditEdited     = "edited"     // its bytes do not hash to the hash it was stored with
	AuditRemoved    = "removed"    // an event before it on its subject is missing
	AuditReordered  = "reordered"  // it is out of its place on its subject
	AuditInserted   = "inserted"   // it chains to an event that has a successor already
	AuditForged     = "forged"     // written without the chain, or not an event
	AuditCheckpoint = "checkpoint" // a checkpoint not signed by the key, or not matching the log
)

// AuditKey is the key that signs the event log's checkpoints, as an
// engine tells it: the key of the engine that answered (Source
// AuditKeyOfEngine), or, from an engine that signs none and from a Client
// without a token, the key the log's newest checkpoint names (Source
// AuditKeyOfCheckpoint, Checkpoint its sequence), which is what the log
// claims. Keep the key apart from the system and verify with it.
type AuditKey struct {
	PublicKey  string
	Source     string
	Checkpoint uint64
}

// Sources of an AuditKey.
const (
	AuditKeyOfEngine     = engine.AuditKeyOfEngine
	AuditKeyOfCheckpoint = engine.AuditKeyOfCheckpoint
)

// auditBackend is what a backend does for the audit.
type auditBackend interface {
	auditVerify(ctx context.Context, f engine.AuditFields) (*engine.AuditReport, int, error)
	auditKey(ctx context.Context) (*engine.AuditKey, error)
}

// AuditVerify verifies the hash chain and the checkpoints of the events
// of a scope of the log (the zero ReplayScope: the whole log), stored from
// s.Since to s.Until, against pubkey (the checkpoint keys to trust,
// comma-separated; "": the key each checkpoint names, which proves only
// that the log agrees with itself). A token client's token of one
// namespace verifies that namespace's part only (another is ErrDenied, a
// job of another ErrNotFound); one of every namespace must be an admin's.
func (c *Client) AuditVerify(ctx context.Context, s ReplayScope, pubkey string) (*AuditReport, error) {
	sc := s.command()
	rep, notShown, err := c.b.auditVerify(ctx, engine.AuditFields{Job: sc.Job, Namespace: sc.Namespace, Queue: sc.Queue,
		Type: sc.Type, Since: sc.Since, Until: sc.Until, Pubkey: pubkey})
	if err != nil {
		return nil, publicErr(err)
	}
	out := &AuditReport{Events: rep.Events, Subjects: rep.Subjects, Checkpoints: rep.Checkpoints, Findings: []AuditFinding{},
		Covered: rep.Covered, Uncovered: rep.Uncovered, Key: rep.Key, KeyPinned: rep.KeyPinned, FindingsNotShown: notShown}
	for _, f := range rep.Findings {
		out.Findings = append(out.Findings, AuditFinding{Kind: f.Kind, Subject: f.Subject, Job: f.Job, Seq: f.Seq, What: f.What})
	}
	return out, nil
}

// AuditPublicKey is the key that signs the event log's checkpoints (see
// AuditKey); ErrNotFound when no engine signs them and the log has no
// checkpoint.
func (c *Client) AuditPublicKey(ctx context.Context) (*AuditKey, error) {
	k, err := c.b.auditKey(ctx)
	if err != nil {
		return nil, publicErr(err)
	}
	return &AuditKey{PublicKey: k.PublicKey, Source: k.Source, Checkpoint: k.Checkpoint}, nil
}

func (d direct) auditVerify(ctx context.Context, f engine.AuditFields) (*engine.AuditReport, int, error) {
	req, err := f.Request()
	if err != nil {
		return nil, 0, err
	}
	rep, err := req.Verify(ctx, d.store.JS)
	return rep, 0, err
}

func (d direct) auditKey(ctx context.Context) (*engine.AuditKey, error) {
	return engine.AuditKeyOf(ctx, d.store.JS, "")
}

func (c command) auditVerify(ctx context.Context, f engine.AuditFields) (*engine.AuditReport, int, error) {
	var out struct {
		Report           *engine.AuditReport `json:"report"`
		FindingsNotShown int                 `json:"findings_not_shown"`
	}
	if err := c.call(ctx, "audit_verify", f, &out, rebuildWait); err != nil {
		return nil, 0, err
	}
	if out.Report == nil {
		return nil, 0, errors.New("audit_verify: the reply has no report")
	}
	return out.Report, out.FindingsNotShown, nil
}

func (c command) auditKey(ctx context.Context) (*engine.AuditKey, error) {
	var out engine.AuditKey
	if err := c.call(ctx, "audit_pubkey", struct{}{}, &out, commandWait); err != nil {
		return nil, err
	}
	return &out, nil
}
