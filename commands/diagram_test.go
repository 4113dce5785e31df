package commands_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// The lifecycle diagram in docs/architecture.md draws commands.Lifecycle:
// every move of the table is an arrow of the diagram and every arrow a
// move of the table (several events of one move share its arrow), and the
// terminal states end there.
func TestDiagramDrawsTheLifecycle(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```mermaid\nstateDiagram-v2\n")
	if !ok {
		t.Fatal("docs/architecture.md has no stateDiagram-v2")
	}
	diagram, _, _ := strings.Cut(rest, "```")
	arrow := regexp.MustCompile(`^\s*(\[\*\]|[a-z]+)\s*-->\s*(\[\*\]|[a-z]+)\s*(:.*)?$`)
	var drawn []string
	for _, line := range strings.Split(diagram, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		m := arrow.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not an arrow of the diagram: %q", line)
		}
		drawn = append(drawn, m[1]+" -> "+m[2])
	}
	var table []string
	name := func(s domain.State) string {
		if s == domain.StateNew {
			return "[*]"
		}
		return string(s)
	}
	for _, tr := range commands.Lifecycle {
		table = append(table, name(tr.From)+" -> "+name(tr.To))
	}
	for _, s := range domain.States {
		if s.Terminal() {
			table = append(table, name(s)+" -> [*]")
		}
	}
	slices.Sort(drawn)
	slices.Sort(table)
	table = slices.Compact(table)
	if dup := slices.Compact(slices.Clone(drawn)); len(dup) != len(drawn) {
		t.Errorf("the diagram draws an arrow twice: %v", drawn)
	}
	drawn = slices.Compact(drawn)
	if fmt.Sprint(drawn) != fmt.Sprint(table) {
		var missing, extra []string
		for _, e := range table {
			if !slices.Contains(drawn, e) {
				missing = append(missing, e)
			}
		}
		for _, e := range drawn {
			if !slices.Contains(table, e) {
				extra = append(extra, e)
			}
		}
		t.Fatalf("docs/architecture.md's diagram differs from commands.Lifecycle:\n not drawn: %v\n not in the table: %v", missing, extra)
	}
}
