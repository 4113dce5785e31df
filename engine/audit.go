package engine

import (
	"context"
	"io"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jetflow/jetflow/engine/internal/audit"
	"github.com/jetflow/jetflow/engine/internal/cmdservice"
)

// The audit of the event log (docs/audit.md), for the CLI, the HTTP API
// and the Go client.
type (
	AuditScope   = audit.Scope
	AuditReport  = audit.Report
	AuditFinding = audit.Finding
	// AuditFields are a verification as a client asks for it (the
	// audit_verify verb's body, GET /api/v1/audit/verify's query); their
	// Request reads and checks them, its Authorize holds it to a
	// principal, its Verify runs it.
	AuditFields = cmdservice.AuditFields
	// AuditKey is the checkpoint key a client is told.
	AuditKey = cmdservice.AuditKey
	// AuditExportFields are an export as a client asks for it (the
	// audit_export verb's body, GET /api/v1/audit/export's query); their
	// Scope reads and checks them. AuditExportReply is what audit_export
	// answers after its chunks.
	AuditExportFields = cmdservice.AuditExportFields
	AuditExportReply  = cmdservice.AuditExportReply
)

// ExportChunkHeader numbers the chunks audit_export streams to the
// request's reply subject (cmdservice.ExportChunkHeader).
const ExportChunkHeader = cmdservice.ExportChunkHeader

// ExportStopHeader on the answer to a chunk stops the export.
const ExportStopHeader = cmdservice.ExportStopHeader

// Sources of an AuditKey.
const (
	AuditKeyOfEngine     = cmdservice.KeyOfEngine
	AuditKeyOfCheckpoint = cmdservice.KeyOfCheckpoint
)

// AuditKeyOf is own (the key this process's engine signs checkpoints
// with), else the key the log's newest checkpoint names (ErrNotFound
// when neither is).
func AuditKeyOf(ctx context.Context, js jetstream.JetStream, own string) (*AuditKey, error) {
	return cmdservice.AuditKeyOf(ctx, js, own)
}

// AuditKeyFile is the checkpoint signing key's file in its directory.
const AuditKeyFile = audit.KeyFile

// LoadAuditKey reads the checkpoint signing key from dir, creating it if
// it is not there.
func LoadAuditKey(dir string) (kp nkeys.KeyPair, created bool, err error) { return audit.LoadKey(dir) }

// AuditPublicKey is the public half of a checkpoint signing key.
func AuditPublicKey(kp nkeys.KeyPair) string { return audit.PublicKey(kp) }

// AuditExportScope is what an export holds.
type AuditExportScope = audit.ExportScope

// AuditExport writes the export of scope to w (docs/audit.md).
func AuditExport(ctx context.Context, js jetstream.JetStream, scope AuditExportScope, w io.Writer) (audit.ExportStats, error) {
	return audit.Export(ctx, js, scope, w)
}

// VerifyAuditExport checks an export offline against the trusted key pub.
func VerifyAuditExport(r io.Reader, pub string) (*AuditReport, error) {
	return audit.VerifyExport(r, pub)
}
