// Package layers holds the architecture's tests: every import runs one way
// down the layers docs/architecture.md draws, the pure layers import no
// NATS, and a job's state is compared only where the rules and folds live.
package layers

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/jetflow/jetflow"

// rank is a package's layer: a package may import only packages of a lower
// rank (or, within engine/internal, the rooms the table below allows).
// Packages not listed (tests, examples, cmd) stand on top and may import
// anything.
func rank(pkg string) (int, bool) {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	r, ok := ranks[rel]
	return r, ok
}

// ranks are the layers, from the ground up: the vocabulary, the rules, the
// folds, the JetStream layer, the files store; the engine's rooms (the
// store and the small rooms beside it, then the rooms built on the store,
// then those built on them), the engine's assembly and facade; the public
// API; what is built on it.
var ranks = map[string]int{
	"internal/domain": 0, "internal/lifecycle": 0,
	"commands":    1,
	"projections": 2, "internal/tracing": 2,
	"streams":               3,
	"files":                 4,
	"engine/internal/store": 5, "engine/internal/pull": 5, "engine/internal/problems": 5,
	"engine/internal/registry": 6, "engine/internal/auth": 6, "engine/internal/remote": 6, "engine/internal/replay": 6, "engine/internal/schedules": 6, "engine/internal/audit": 6,
	"engine/internal/runtime": 7, "engine/internal/maintenance": 7, "engine/internal/cmdservice": 7, "engine/internal/natsserver": 7,
	"engine":               8,
	"internal/clientstore": 9,
	"":                     10,
	"shell":                11, "subscribe": 11,
	"gateway":     12,
	"jetflowtest": 13,
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

func TestImportsRunOneWayDown(t *testing.T) {
	var wrong []string
	for _, p := range listPackages(t) {
		from, ok := rank(p.ImportPath)
		if !ok {
			if !onTop(p.ImportPath) {
				wrong = append(wrong, fmt.Sprintf("%s has no layer: add it to ranks", p.ImportPath))
			}
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to, ok := rank(imp)
			if !ok {
				wrong = append(wrong, fmt.Sprintf("%s imports %s, which has no layer (add it to ranks, or it stands on top)", p.ImportPath, imp))
				continue
			}
			if to < from {
				continue
			}
			wrong = append(wrong, fmt.Sprintf("%s (layer %d) imports %s (layer %d)", p.ImportPath, from, imp, to))
		}
	}
	for _, w := range wrong {
		t.Error(w)
	}
}

// The vocabulary, the rules and the folds are pure: no NATS, no HTTP.
func TestPureLayersImportNoIO(t *testing.T) {
	pure := map[string]bool{module + "/internal/domain": true, module + "/commands": true, module + "/projections": true}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..")
	for p := range pure {
		c := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", p)
		c.Dir = dir
		out, err := c.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", p, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/nats-io/") || dep == "net/http" || dep == "net" {
				t.Errorf("%s depends on %s", p, dep)
			}
		}
	}
}

// onTop reports whether a package stands above every layer: the CLI, the
// tests and their helpers, the examples.
func onTop(pkg string) bool {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	for _, top := range []string{"cmd/", "tests/", "examples/", "internal/testkit", "engine/internal/storetest"} {
		if strings.HasPrefix(rel, top) {
			return true
		}
	}
	return false
}
