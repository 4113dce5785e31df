package process

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// `jetflow type register` killed right after its type.registered is in the
// log, before the type's record (register:appended): the type stands at
// once. The first submit of the type reads it from the log (a type without
// a record is folded from its events, and its record written back), so a
// payload against its schema is refused with no window; registering it
// again finds it there (exists: nothing written). This holds without the
// Projector: its repair of the record is not what the test waits for.
func TestTypeRegisterCrashPoint(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	ctx := testkit.Ctx(t)
	schema := filepath.Join(t.TempDir(), "invoice.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","required":["amount"],"properties":{"amount":{"type":"number"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	const full = "default:billing:invoice"
	if _, sig, out := s.cli([]string{"JETFLOW_CRASH_AT=register:appended"}, "type", "register", full, "--schema", schema); sig != syscall.SIGKILL {
		t.Fatalf("type register was not killed at register:appended:\n%s", out)
	}
	// At once, without waiting for the Projector: a type without a record
	// is read from the log (and its record written back).
	_, err := s.client.Submit(ctx, "billing:invoice", map[string]string{"amount": "lots"})
	if p := jetflow.ProblemOf(err); p == nil || p.Type != "schema-violation" {
		t.Fatalf("a payload against the schema, right after the killed register: %v", err)
	}
	if _, err := s.client.Submit(ctx, "billing:invoice", map[string]float64{"amount": 12.5}); err != nil {
		t.Fatalf("a payload the schema takes: %v", err)
	}
	if code, _, out := s.cli(nil, "type", "register", full, "--schema", schema); code != 0 || !strings.Contains(out, full+"\texists") {
		t.Fatalf("registered again after the killed one: exit %d: %s", code, out)
	}
	s.verify()
}
