package process

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// runSh reads an input file, writes two output files (one in a
// subdirectory), and says something on stdout and stderr; with FAIL in
// the payload it exits 3 after writing one output.
const runSh = `set -e
tr a-z A-Z < data/in.txt > "$JETFLOW_OUTPUT/upper.txt"
if [ -n "$(echo "$JETFLOW_PAYLOAD" | grep FAIL)" ]; then echo "failing" >&2; exit 3; fi
mkdir -p "$JETFLOW_OUTPUT/sub"
wc -c < data/in.txt | tr -d ' ' > "$JETFLOW_OUTPUT/sub/count.txt"
echo "done"
echo "a warning" >&2
`

// postFiles submits a job with files over HTTP (multipart) and returns the
// job's id.
func (s *system) postFiles(job string, fs map[string]string) string {
	s.t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	jp, _ := mw.CreateFormField("job")
	io.WriteString(jp, job)
	names := make([]string, 0, len(fs))
	for n := range fs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": "file", "filename": n}))
		p, _ := mw.CreatePart(h)
		io.WriteString(p, fs[n])
	}
	mw.Close()
	res, err := http.Post("http://"+s.http+"/api/v1/jobs", mw.FormDataContentType(), &b)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusCreated {
		s.t.Fatalf("submit: %d %s", res.StatusCode, body)
	}
	var v struct{ ID string }
	if err := json.Unmarshal(body, &v); err != nil {
		s.t.Fatal(err)
	}
	return v.ID
}

// download waits for GET /jobs/{id}/download to answer 200 (202 until the
// job ended) and extracts the archive into a new directory.
func (s *system) download(id string) (dir string, names []string) {
	s.t.Helper()
	var zb []byte
	testkit.WaitFor(s.t, 30*time.Second, func() error {
		res, err := http.Get("http://" + s.http + "/api/v1/jobs/" + id + "/download")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		switch res.StatusCode {
		case http.StatusOK:
			if ct, cd := res.Header.Get("Content-Type"), res.Header.Get("Content-Disposition"); ct != "application/zip" ||
				cd != `attachment; filename=`+id+`.zip` && cd != `attachment; filename="`+id+`.zip"` {
				s.t.Fatalf("headers %q %q", ct, cd)
			}
			zb = b
			return nil
		case http.StatusAccepted:
			return testkit.Errorf("202: %s", b)
		}
		s.t.Fatalf("download: %d %s", res.StatusCode, b)
		return nil
	})
	zr, err := zip.NewReader(bytes.NewReader(zb), int64(len(zb)))
	if err != nil {
		s.t.Fatal(err)
	}
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	dir = s.t.TempDir()
	if err := files.Extract(zr, dir, 1<<20); err != nil {
		s.t.Fatal(err)
	}
	return dir, names
}

func wantFile(t *testing.T, dir, name, want string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil || string(b) != want {
		t.Errorf("%s: %q, %v; want %q", name, b, err, want)
	}
}

// A shell job with files end to end: submitted over HTTP (multipart) with
// run.sh and an input, run by a `jetflow worker --exec` process, its
// archive downloaded and unzipped: the two outputs, stdout and stderr. A
// job that fails still leaves its archive.
func TestShellJobWithFiles(t *testing.T) {
	t.Parallel()
	s := startSystemHTTP(t, true)
	s.worker("F", nil, "--exec", "shell.files=", "--work-dir", t.TempDir())

	id := s.postFiles(`{"type":"shell.files","payload":{}}`, map[string]string{"run.sh": runSh, "data/in.txt": "hello files\n"})
	dir, names := s.download(id)
	if want := []string{"out/sub/count.txt", "out/upper.txt", "stderr.txt", "stdout.txt"}; !slices.Equal(names, want) {
		t.Fatalf("archive holds %q, want %q", names, want)
	}
	wantFile(t, dir, "out/upper.txt", "HELLO FILES\n")
	wantFile(t, dir, "out/sub/count.txt", "12\n")
	wantFile(t, dir, "stdout.txt", "done\n")
	wantFile(t, dir, "stderr.txt", "a warning\n")
	job := testkit.WaitTerminal(t, s.client, id, 10*time.Second)
	if job.State != jetflow.Succeeded || len(job.Files) != 2 {
		t.Errorf("job %s with files %+v", job.State, job.Files)
	}

	// GET /files lists the inputs and the archive.
	res, err := http.Get("http://" + s.http + "/api/v1/jobs/" + id + "/files")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Inputs, Outputs []domain.FileRef }
	json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	if len(list.Inputs) != 2 || list.Inputs[0].Name != "data/in.txt" || list.Inputs[1].Name != "run.sh" ||
		len(list.Outputs) != 1 || list.Outputs[0].Name != files.ResultName {
		t.Errorf("files %+v", list)
	}

	// Exit 3, not retried: failed, and its archive has what it wrote.
	id = s.postFiles(`{"type":"shell.files","payload":"FAIL","no_retry_on":["EXIT_3"]}`,
		map[string]string{"run.sh": runSh, "data/in.txt": "x"})
	dir, names = s.download(id)
	if want := []string{"out/upper.txt", "stderr.txt", "stdout.txt"}; !slices.Equal(names, want) {
		t.Fatalf("failed job's archive holds %q, want %q", names, want)
	}
	wantFile(t, dir, "out/upper.txt", "X")
	wantFile(t, dir, "stderr.txt", "failing\n")
	if job := testkit.WaitTerminal(t, s.client, id, 10*time.Second); job.State != jetflow.Failed || job.Error.Code != "EXIT_3" {
		t.Errorf("job %s %+v", job.State, job.Error)
	}
}

// The CLI: `jetflow submit --file DIR` uploads the directory's tree,
// `jetflow download --wait -o FILE` writes the archive.
func TestShellJobWithFilesCLI(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.worker("C", nil, "--exec", "shell.cli=", "--work-dir", t.TempDir())
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "data"), 0o700)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte(runSh), 0o600)
	os.WriteFile(filepath.Join(src, "data", "in.txt"), []byte("from the cli"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(src, "data", "link")) // left out

	code, _, out := s.cli(nil, "submit", "shell.cli", "{}", "--file", src, "--json")
	if code != 0 {
		t.Fatalf("submit exited %d: %s", code, out)
	}
	var v struct {
		ID    string
		Files []domain.FileRef
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Files) != 2 {
		t.Fatalf("submit printed %s (%v)", out, err)
	}
	zipPath := filepath.Join(t.TempDir(), "r.zip")
	if code, _, out := s.cli(nil, "download", v.ID, "-o", zipPath, "--wait"); code != 0 {
		t.Fatalf("download exited %d: %s", code, out)
	}
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	dir := t.TempDir()
	if err := files.Extract(&zr.Reader, dir, 1<<20); err != nil {
		t.Fatal(err)
	}
	wantFile(t, dir, "out/upper.txt", "FROM THE CLI")
	wantFile(t, dir, "out/sub/count.txt", "12\n")
	wantFile(t, dir, "stdout.txt", "done\n")

	if code, _, out := s.cli(nil, "download", domain.NewID()); code != 2 {
		t.Errorf("download of an unknown job exited %d: %s", code, out)
	}
	code, _, out = s.cli(nil, "submit", "shell.cli", "--file", filepath.Join(src, "run.sh"), "--file", filepath.Join(src, "run.sh"))
	if code != 2 {
		t.Errorf("two files of one name: exit %d: %s", code, out)
	}
}

// A shell job with files whose worker is killed mid-script (SIGKILL): the
// job is requeued, the next worker places the files again and runs it, and
// in the end there is one archive, the second attempt's.
func TestShellJobWithFilesKilledWorker(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	script := `cp in.txt "$JETFLOW_OUTPUT/got.txt"
echo "attempt $JETFLOW_ATTEMPT" > "$JETFLOW_OUTPUT/attempt.txt"
if [ "$JETFLOW_ATTEMPT" = 1 ]; then sleep 1000; fi`
	args := []string{"--exec", "shell.k=" + script, "--work-dir", t.TempDir(), "--kill-grace", "300ms"}
	a := s.worker("A", nil, args...)
	ctx := testkit.Ctx(t)
	job, err := s.client.Submit(ctx, "shell.k", nil, jetflow.MaxRetries(0),
		jetflow.Files(map[string]io.Reader{"in.txt": strings.NewReader("the input")}))
	if err != nil {
		t.Fatal(err)
	}
	s.waitRunning(job.ID, "A")
	a.Kill(t)
	s.worker("B", nil, args...)
	done := testkit.WaitTerminal(t, s.client, job.ID, 30*time.Second)
	if done.State != jetflow.Succeeded || done.Worker != "B" || done.Attempts != 2 {
		t.Fatalf("job %s under %s, attempts %d, error %+v", done.State, done.Worker, done.Attempts, done.Error)
	}
	var zb bytes.Buffer
	if _, err := s.client.Download(ctx, job.ID, &zb); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(zb.Bytes()), int64(zb.Len()))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := files.Extract(zr, dir, 1<<20); err != nil {
		t.Fatal(err)
	}
	wantFile(t, dir, "out/got.txt", "the input")
	wantFile(t, dir, "out/attempt.txt", "attempt 2\n")
	obs, err := testkit.StoreOf(t, s.client).JS.ObjectStore(ctx, streams.FilesBucket)
	if err != nil {
		t.Fatal(err)
	}
	list, err := obs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list {
		names = append(names, o.Name)
	}
	slices.Sort(names)
	if want := []string{files.InputKey(job.ID, "in.txt"), files.ResultKey(job.ID)}; !slices.Equal(names, want) {
		t.Errorf("objects %q, want %q", names, want)
	}
}

// With `serve --nats-auth`, a `jetflow worker --exec` connected as the
// worker user places a job's files and stores its archive without a
// permission violation.
func TestShellJobWithFilesNATSAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	addr, data := testkit.FreeAddr(t), t.TempDir()
	s := &system{t: t, url: "nats://" + addr}
	serve := testkit.StartProc(t, "serve", nil, binary, "serve", "--data", data, "--nats-listen", addr, "--http", "off",
		"--nats-auth", "--projector-lag", "300ms")
	serve.WaitOutput(t, 30*time.Second, "jetflow is running")
	b, err := os.ReadFile(filepath.Join(data, jetflow.NATSUsersFile))
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Users jetflow.NATSUsers }
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	eng, _ := file.Users.Role(jetflow.NATSRoleEngine)
	wrk, _ := file.Users.Role(jetflow.NATSRoleWorker)
	asEngine := []string{"JETFLOW_NATS_USER=" + eng.User, "JETFLOW_NATS_PASSWORD=" + eng.Password}
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "data"), 0o700)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte(runSh), 0o600)
	os.WriteFile(filepath.Join(src, "data", "in.txt"), []byte("with auth"), 0o600)
	code, _, out := s.cli(asEngine, "submit", "shell.auth", "{}", "--file", src, "--json")
	if code != 0 {
		t.Fatalf("submit: %d %s", code, out)
	}
	var v struct{ ID string }
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	// The worker user may not create the queue: it starts once a submit made it.
	w := testkit.StartProc(t, "worker", []string{"JETFLOW_NATS_USER=" + wrk.User, "JETFLOW_NATS_PASSWORD=" + wrk.Password},
		binary, "worker", "--nats", s.url, "--id", "wa", "--exec", "shell.auth=", "--work-dir", t.TempDir())
	w.WaitOutput(t, 30*time.Second, "worker wa running")

	zipPath := filepath.Join(t.TempDir(), "r.zip")
	if code, _, out := s.cli(asEngine, "download", v.ID, "-o", zipPath, "--wait"); code != 0 {
		t.Fatalf("download: %d %s\nworker:\n%s", code, out, w.Output())
	}
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	dir := t.TempDir()
	if err := files.Extract(&zr.Reader, dir, 1<<20); err != nil {
		t.Fatal(err)
	}
	wantFile(t, dir, "out/upper.txt", "WITH AUTH")
	if strings.Contains(w.Output(), "iolation") {
		t.Fatalf("the worker met a permission violation:\n%s", w.Output())
	}
}
