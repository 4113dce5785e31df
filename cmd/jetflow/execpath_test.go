package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A relative path of a file of the worker's directory, as the command
// name (with a slash) or an argument, is made absolute; what bash would
// look for elsewhere (PATH, the job's input files, expansions) is left.
func TestResolveCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, f := range []string{"build.sh", "my script.sh", "input.txt", filepath.Join("bin", "tool")} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o700)
		if err := os.WriteFile(filepath.Join(dir, f), []byte("echo ran $0 \"$@\"\n"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	q := shellQuote
	for _, tc := range []struct {
		in, want string
		files    []string
	}{
		{"bash build.sh", "bash " + q(dir+"/build.sh"), []string{"build.sh"}},
		{"./build.sh --fast", q(dir+"/build.sh") + " --fast", []string{"./build.sh"}},
		{"bin/tool a b", q(dir+"/bin/tool") + " a b", []string{"bin/tool"}},
		{`bash 'my script.sh'`, "bash " + q(dir+"/my script.sh"), []string{"my script.sh"}},
		{`bash "my script.sh" < input.txt`, "bash " + q(dir+"/my script.sh") + " < " + q(dir+"/input.txt"), []string{"my script.sh", "input.txt"}},
		{"cd /tmp && bash build.sh>out.txt", "cd /tmp && bash " + q(dir+"/build.sh") + ">out.txt", []string{"build.sh"}},
		{"X=1 ./build.sh", "X=1 " + q(dir+"/build.sh"), []string{"./build.sh"}},
		{"build.sh", "build.sh", nil},                                 // a command name without a slash: PATH
		{"bash run.sh", "bash run.sh", nil},                           // not in dir: an input file of the job
		{"bash $PWD/build.sh", "bash $PWD/build.sh", nil},             // an expansion: the job's directory
		{"bash *.sh", "bash *.sh", nil},                               // a glob
		{"bash bin", "bash bin", nil},                                 // a directory
		{"bash --rcfile=build.sh x", "bash --rcfile=build.sh x", nil}, // a flag
		{"bash 'build.sh", "bash 'build.sh", nil},                     // unreadable: left as it is
		{"bash " + dir + "/build.sh", "bash " + dir + "/build.sh", nil},
	} {
		got, files := resolveCommand(tc.in, dir)
		if got != tc.want || !slices.Equal(files, tc.files) {
			t.Errorf("%q: %q %q; want %q %q", tc.in, got, files, tc.want, tc.files)
		}
	}
	// What bash makes of it, run from elsewhere.
	cmd, _ := resolveCommand(`bash "my script.sh" one && bin/tool two`, dir)
	run := exec.Command("bash", "-c", cmd)
	run.Dir = t.TempDir()
	out, err := run.CombinedOutput()
	if err != nil || strings.Count(string(out), "ran ") != 2 || !strings.Contains(string(out), "one") || !strings.Contains(string(out), "two") {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
}
