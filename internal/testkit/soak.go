package testkit

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildBinary builds the main package pkg (an import path) into the test's
// temp dir, without the race detector, and returns the binary's path: for
// helper processes a test starts (a NATS node of a cluster) that should not
// run at race-detector speed.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return bin
}
