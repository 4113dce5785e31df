// Package python_test runs the Python package's tests (python/tests) against
// real `jetflow serve` processes: one open, one with --auth, each with an
// embedded NATS server on a free loopback port and a 3 s lease for HTTP
// workers (so heartbeats come every second). It also checks that the
// package installs with pip.
package python_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	binary string // the jetflow binary, built once by TestMain
	root   string // the module's root
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	root = filepath.Clean(filepath.Join(wd, "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		fmt.Fprintln(os.Stderr, "module root not found:", err)
		return 1
	}
	if testing.Short() {
		return m.Run() // the tests skip themselves
	}
	dir, err := os.MkdirTemp("", "jetflow-python-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "jetflow")
	build := exec.Command("go", "build", "-o", binary, "./cmd/jetflow")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/jetflow: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// python3 returns the interpreter, or skips the test when there is none.
func python3(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	return p
}

// syncBuffer is a bytes.Buffer that a process's output goroutines and the
// test may use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// server is one `jetflow serve` process.
type server struct {
	url   string // http://127.0.0.1:port
	data  string
	token string // the first admin token, with --auth
	out   *syncBuffer
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServe starts serve on free loopback ports and waits until GET
// /readyz answers 200; it is stopped (SIGTERM) when the test ends.
func startServe(t *testing.T, auth bool) *server {
	t.Helper()
	s := &server{data: t.TempDir(), out: &syncBuffer{}}
	web := freeAddr(t)
	s.url = "http://" + web
	args := []string{"serve", "--data", s.data, "--nats-listen", freeAddr(t), "--http", web, "--http-lease", "3s"}
	if auth {
		args = append(args, "--auth")
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("serve %v exited: %v\n%s", args, err, s.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve %v not ready after 60s:\n%s", args, s.out.String())
		}
		if auth && s.token == "" {
			if b, err := os.ReadFile(filepath.Join(s.data, "admin-token")); err == nil && len(bytes.TrimSpace(b)) > 0 {
				s.token = string(bytes.TrimSpace(b))
			}
		}
		if (!auth || s.token != "") && s.ready() {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) ready() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/readyz", nil)
	if err != nil {
		return false
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode == http.StatusOK
}

var skipLine = regexp.MustCompile(`(?m)^(test\S+ \(\S+\)).*\.\.\. skipped '(.*)'$`)

// TestPythonSuite runs `python3 -m unittest discover -s python/tests -t
// python -v` with JETFLOW_URL naming an open server, JETFLOW_AUTH_URL and
// JETFLOW_ADMIN_TOKEN a server with access control, and fails on a
// non-zero exit, printing the suite's output.
func TestPythonSuite(t *testing.T) {
	py := python3(t)
	open := startServe(t, false)
	auth := startServe(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", "python/tests", "-t", "python", "-v")
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"JETFLOW_URL="+open.url,
		"JETFLOW_AUTH_URL="+auth.url,
		"JETFLOW_ADMIN_TOKEN="+auth.token,
		"JETFLOW_TOKEN=",
		"PYTHONPATH=python",
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
	)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		t.Fatalf("python tests failed after %s: %v\n%s\n--- serve (open) ---\n%s\n--- serve (auth) ---\n%s",
			took, err, out.String(), open.out.String(), auth.out.String())
	}
	t.Logf("python tests passed in %s", took)
	for _, m := range skipLine.FindAllStringSubmatch(out.String(), -1) {
		t.Logf("skipped: %s: %s", m[1], m[2])
	}
	if testing.Verbose() {
		t.Log(out.String())
	}
}

// TestPipInstall checks that `pip install ./python` installs the package
// (into a fresh venv; without venv, a wheel built with pip and setuptools),
// and that the installed package imports and runs `python -m jetflow`.
func TestPipInstall(t *testing.T) {
	py := python3(t)
	tmp := t.TempDir()
	// Build from a copy: pip builds in the source tree (build/, *.egg-info).
	src := filepath.Join(tmp, "python")
	for _, name := range []string{"pyproject.toml", "README.md", "jetflow"} {
		if err := copyTree(filepath.Join(root, "python", name), filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	runCmd := func(env []string, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), append([]string{"PYTHONPATH=", "PIP_DISABLE_PIP_VERSION_CHECK=1"}, env...)...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	check := func(pyExe string, env ...string) {
		t.Helper()
		out, err := runCmd(env, pyExe, "-c", "import jetflow, os; print(jetflow.__version__, os.path.dirname(jetflow.__file__)); jetflow.Client; jetflow.Worker")
		if err != nil {
			t.Fatalf("import the installed package: %v\n%s", err, out)
		}
		if !strings.HasPrefix(strings.TrimSpace(out), "0.") || strings.Contains(out, filepath.Join(root, "python")) {
			t.Fatalf("imported %q, not the installed package", out)
		}
		out, err = runCmd(env, pyExe, "-m", "jetflow", "worker", "--help")
		if err != nil || !strings.Contains(out, "module:worker") {
			t.Fatalf("python -m jetflow worker --help: %v\n%s", err, out)
		}
	}
	// Setuptools builds a wheel offline when it is 70.1 or newer, or has
	// the wheel package at hand.
	const offline = "import setuptools; v = tuple(int(x) for x in setuptools.__version__.split('.')[:2]); v >= (70, 1) or __import__('wheel')"
	venv := filepath.Join(tmp, "venv")
	// --system-site-packages: the venv sees the system's setuptools and
	// wheel, if any, to build without a package index.
	if out, err := runCmd(nil, py, "-m", "venv", "--system-site-packages", venv); err == nil {
		vpy := filepath.Join(venv, "bin", "python")
		args := []string{"-m", "pip", "install", "--no-input", "--retries", "1", "--timeout", "15", src}
		if _, err := runCmd(nil, vpy, "-c", offline); err == nil {
			args = []string{"-m", "pip", "install", "--no-input", "--no-index", "--no-build-isolation", src}
		}
		out, err := runCmd(nil, vpy, args...)
		if err != nil {
			if strings.Contains(out, "No matching distribution found for setuptools") {
				t.Skipf("pip install ./python needs setuptools (and wheel) from a package index, and none is reachable; "+
					"install python3-wheel or give pip an index:\n%s", out)
			}
			t.Fatalf("pip install ./python: %v\n%s", err, out)
		}
		check(vpy)
		return
	} else {
		t.Logf("python3 -m venv is unavailable (%v): building a wheel instead\n%s", err, out)
	}
	if _, err := runCmd(nil, py, "-c", "import pip; "+offline); err != nil {
		t.Skip("python3 has no venv, and no pip with setuptools (70.1+, or with wheel) to build a wheel: " +
			"cannot check pip install ./python (install python3-venv)")
	}
	wheels := filepath.Join(tmp, "wheels")
	out, err := runCmd(nil, py, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", wheels, src)
	if err != nil {
		t.Fatalf("pip wheel ./python: %v\n%s", err, out)
	}
	found, _ := filepath.Glob(filepath.Join(wheels, "jetflow-*.whl"))
	if len(found) != 1 {
		t.Fatalf("pip wheel made %v:\n%s", found, out)
	}
	// A pure-Python wheel imports from the zip itself.
	check(py, "PYTHONPATH="+found[0])
}

func copyTree(from, to string) error {
	return filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			if fi.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			return os.MkdirAll(dst, 0o755)
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}
