package engine_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDecisionsStayInCommands: the engine translates and writes; the rules
// are package commands'. A state predicate (held: claimed or running) is
// commands.Held, never spelled out here, and no behaviour hangs on an
// operation's label (an explicit option says it).
func TestDecisionsStayInCommands(t *testing.T) {
	held := regexp.MustCompile(`State(Claimed|Running)\b.*\|\|.*State(Claimed|Running)\b`)
	label := regexp.MustCompile(`\bop ==|== "(cancel|claim|complete|requeue|lease|reap|admit|hold|due|purge)"`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			if held.MatchString(line) {
				t.Errorf("%s:%d: the held rule spelled out (commands.Held): %s", path, i+1, strings.TrimSpace(line))
			}
			if label.MatchString(line) {
				t.Errorf("%s:%d: behaviour keyed on an operation's label: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
