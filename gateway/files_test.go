package gateway

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// upFile is a file part of a multipart submit.
type upFile struct{ name, content string }

// multipartBody is a multipart/form-data submit: the job part, then the
// files, each named by its filename parameter exactly as given.
func multipartBody(t testing.TB, job string, fs ...upFile) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	jp, err := mw.CreateFormField("job")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(jp, job)
	for _, f := range fs {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": "file", "filename": f.name}))
		h.Set("Content-Type", "application/octet-stream")
		p, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(p, f.content)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), mw.FormDataContentType()
}

func (e *env) submitFiles(job string, fs ...upFile) resp {
	e.t.Helper()
	body, ct := multipartBody(e.t, job, fs...)
	return e.do("POST", "/api/v1/jobs", body, "Content-Type", ct)
}

// objects lists the names in the files bucket.
func (e *env) objects() []string {
	e.t.Helper()
	obs, err := e.store.JS.ObjectStore(e.ctx, streams.FilesBucket)
	if err != nil {
		e.t.Fatal(err)
	}
	list, err := obs.List(e.ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, o := range list {
		names = append(names, o.Name)
	}
	return names
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
}

// TestSubmitWithFiles: a multipart submit stores its files under the job
// before the job is queued, records them in the spec, and lists them.
func TestSubmitWithFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.submitFiles(`{"type":"shell.run","payload":{"n":1}}`,
		upFile{"run.sh", "echo hi\n"}, upFile{"data/in.txt", "hello"}, upFile{"empty", ""})
	v := r.want(t, http.StatusCreated).job(t)
	if v.State != domain.StateQueued || string(v.Payload) != `{"n":1}` {
		t.Fatalf("job %+v", v)
	}
	want := []domain.FileRef{{Name: "run.sh", Size: 8, Digest: digest("echo hi\n")},
		{Name: "data/in.txt", Size: 5, Digest: digest("hello")}, {Name: "empty", Size: 0, Digest: digest("")}}
	var list fileList
	e.do("GET", "/api/v1/jobs/"+v.ID+"/files", nil).want(t, http.StatusOK).json(t, &list)
	if fmt.Sprint(list.Inputs) != fmt.Sprint(want) || len(list.Outputs) != 0 || list.Download != "" {
		t.Fatalf("files %+v, want inputs %+v and no outputs", list, want)
	}
	fs, err := files.Open(e.ctx, e.store.JS, e.store.Topo)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range want {
		res, err := fs.Input(e.ctx, v.ID, f)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res)
		res.Close()
		if content := []string{"echo hi\n", "hello", ""}[i]; string(b) != content {
			t.Errorf("%s holds %q, want %q", f.Name, b, content)
		}
	}
	// The spec, as the job record has it.
	snap, err := e.store.Current(e.ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(snap.Job.Spec.Files) != fmt.Sprint(want) {
		t.Errorf("spec files %+v", snap.Job.Spec.Files)
	}
	// A job with no files part is a job without files.
	plain := e.submitFiles(`{"type":"shell.run"}`).want(t, http.StatusCreated).job(t)
	e.do("GET", "/api/v1/jobs/"+plain.ID+"/files", nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Inputs) != 0 {
		t.Errorf("plain job's inputs: %+v", list.Inputs)
	}
	e.do("GET", "/api/v1/jobs/"+domain.NewID()+"/files", nil).problem(t, http.StatusNotFound, "not-found")
}

// TestSubmitBadFileNames: every refused name is 400 invalid-file-name
// naming the file, and nothing is written: no job, no object.
func TestSubmitBadFileNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name  string
		files []upFile
	}{
		{"empty", []upFile{{"", "x"}}},
		{"absolute", []upFile{{"/etc/passwd", "x"}}},
		{"dotdot", []upFile{{"../x", "x"}}},
		{"dotdot inside", []upFile{{"a/../../x", "x"}}},
		{"dotdot last", []upFile{{"a/..", "x"}}},
		{"dot", []upFile{{"./x", "x"}}},
		{"doubled slash", []upFile{{"a//b", "x"}}},
		{"trailing slash", []upFile{{"a/", "x"}}},
		{"NUL", []upFile{{"a\x00b", "x"}}},
		{"newline", []upFile{{"a\nb", "x"}}},
		{"DEL", []upFile{{"a\x7fb", "x"}}},
		{"backslash", []upFile{{`a\b`, "x"}}},
		{"windows dotdot", []upFile{{`..\x`, "x"}}},
		{"invalid UTF-8", []upFile{{"a\xffb", "x"}}},
		{"too long", []upFile{{strings.Repeat("a", commands.MaxFileNameBytes+1), "x"}}},
		{"repeated", []upFile{{"a.txt", "x"}, {"a.txt", "y"}}},
		{"file then its directory", []upFile{{"a", "x"}, {"a/b", "y"}}},
		{"directory then file", []upFile{{"a/b", "x"}, {"a", "y"}}},
		{"payload.json", []upFile{{"payload.json", "x"}}},
		{"out", []upFile{{"out", "x"}}},
		{"under out", []upFile{{"ok.txt", "x"}, {"out/result.txt", "x"}}},
		{"under tmp", []upFile{{"tmp/x", "x"}}},
		{"stdout.txt", []upFile{{"stdout.txt", "x"}}},
		{"stderr.txt", []upFile{{"stderr.txt", "x"}}},
		{"payload.json as a directory", []upFile{{"payload.json/x", "x"}}},
	}
	for _, c := range cases {
		before := e.eventCount()
		p := e.submitFiles(`{"type":"shell.run"}`, c.files...).problem(t, http.StatusBadRequest, "invalid-file-name")
		bad := c.files[len(c.files)-1].name
		if !strings.Contains(p.Detail, fmt.Sprintf("%q", bad)) && !strings.Contains(p.Detail, bad) {
			t.Errorf("%s: detail %q does not name %q", c.name, p.Detail, bad)
		}
		if after := e.eventCount(); after != before {
			t.Errorf("%s: the log grew by %d events", c.name, after-before)
		}
		if objs := e.objects(); len(objs) != 0 {
			t.Errorf("%s: objects left: %q", c.name, objs)
		}
	}
}

// TestSubmitFileLimits: the total size (413) and the count of files (400)
// are limited, and a refused submit leaves nothing; so are a job part that
// is not first, a bad job and a malformed body.
func TestSubmitFileLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxUpload = 1000; c.MaxFiles = 3 })
	nothing := func(what string, before uint64) {
		t.Helper()
		if after := e.eventCount(); after != before {
			t.Errorf("%s: the log grew by %d events", what, after-before)
		}
		if objs := e.objects(); len(objs) != 0 {
			t.Errorf("%s: objects left: %q", what, objs)
		}
	}
	before := e.eventCount()
	big := strings.Repeat("x", 600)
	e.submitFiles(`{"type":"t"}`, upFile{"a", big}, upFile{"b", big}).problem(t, http.StatusRequestEntityTooLarge, "payload-too-large")
	nothing("two files over the limit together", before)
	e.submitFiles(`{"type":"t"}`, upFile{"a", strings.Repeat("x", 1001)}).problem(t, http.StatusRequestEntityTooLarge, "payload-too-large")
	nothing("one file over the limit", before)
	e.submitFiles(`{"type":"t"}`, upFile{"a", strings.Repeat("x", 1000)}).want(t, http.StatusCreated)
	before = e.eventCount()
	for _, o := range e.objects() {
		obs, _ := e.store.JS.ObjectStore(e.ctx, streams.FilesBucket)
		obs.Delete(e.ctx, o)
	}

	// Sent without a length (chunked), the limit holds as it streams.
	body, ct := multipartBody(t, `{"type":"t"}`, upFile{"a", strings.Repeat("y", 5000)})
	req, _ := http.NewRequestWithContext(e.ctx, "POST", e.ts.URL+"/api/v1/jobs", io.MultiReader(bytes.NewReader(body)))
	req.Header.Set("Content-Type", ct)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge || req.ContentLength != 0 {
		t.Errorf("chunked upload over the limit: %d (length %d)", res.StatusCode, req.ContentLength)
	}
	nothing("chunked", before)

	// A body whose length says it is over the limit is refused at once.
	huge := bytes.Repeat([]byte("z"), int(uploadLimits{maxJob: DefaultMaxBodyBytes, maxUpload: 1000, maxFiles: 3}.body()+1))
	e.do("POST", "/api/v1/jobs", huge, "Content-Type", "multipart/form-data; boundary=x").problem(t, http.StatusRequestEntityTooLarge, "payload-too-large")
	nothing("length over the limit", before)

	p := e.submitFiles(`{"type":"t"}`, upFile{"a", "1"}, upFile{"b", "2"}, upFile{"c", "3"}, upFile{"d", "4"}).
		problem(t, http.StatusBadRequest, "invalid-input")
	if p.Field != "files" || !strings.Contains(p.Detail, "3") {
		t.Errorf("too many files: %+v", p)
	}
	nothing("four files of three", before)

	e.submitFiles(`{"type":"t","files":[]}`, upFile{"a", "1"}).problem(t, http.StatusBadRequest, "malformed-request")
	e.submitFiles(`{"type":""}`, upFile{"a", "1"}).problem(t, http.StatusBadRequest, "invalid-input")
	e.submitFiles(`not json`, upFile{"a", "1"}).problem(t, http.StatusBadRequest, "malformed-request")
	nothing("a bad job", before)

	// The job part must come first.
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	fw, _ := mw.CreateFormFile("file", "a.txt")
	io.WriteString(fw, "x")
	jw, _ := mw.CreateFormField("job")
	io.WriteString(jw, `{"type":"t"}`)
	mw.Close()
	e.do("POST", "/api/v1/jobs", b.Bytes(), "Content-Type", mw.FormDataContentType()).problem(t, http.StatusBadRequest, "malformed-request")
	// A part that is not a file after the job.
	b.Reset()
	mw = multipart.NewWriter(&b)
	jw, _ = mw.CreateFormField("job")
	io.WriteString(jw, `{"type":"t"}`)
	ow, _ := mw.CreateFormField("other")
	io.WriteString(ow, "x")
	mw.Close()
	e.do("POST", "/api/v1/jobs", b.Bytes(), "Content-Type", mw.FormDataContentType()).problem(t, http.StatusBadRequest, "malformed-request")
	// Cut short, without its closing boundary.
	body, ct = multipartBody(t, `{"type":"t"}`, upFile{"a", "xyz"})
	e.do("POST", "/api/v1/jobs", body[:len(body)-10], "Content-Type", ct).problem(t, http.StatusBadRequest, "malformed-request")
	e.do("POST", "/api/v1/jobs", "x", "Content-Type", "multipart/form-data").problem(t, http.StatusBadRequest, "malformed-request")
	nothing("malformed bodies", before)
}

// TestSubmitFilesIdempotent: a second submit with the key of an existing
// job answers that job and writes none of its files.
func TestSubmitFilesIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.submitFiles(`{"type":"t","idempotency_key":"k1"}`, upFile{"a", "first"}).want(t, http.StatusCreated).job(t)
	again := e.submitFiles(`{"type":"t","idempotency_key":"k1"}`, upFile{"a", "second"}, upFile{"b", "x"}).want(t, http.StatusOK).job(t)
	if again.ID != first.ID {
		t.Fatalf("ids %s and %s", first.ID, again.ID)
	}
	var list fileList
	e.do("GET", "/api/v1/jobs/"+first.ID+"/files", nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Inputs) != 1 || list.Inputs[0].Digest != digest("first") {
		t.Errorf("inputs %+v", list.Inputs)
	}
	if objs := e.objects(); len(objs) != 1 {
		t.Errorf("objects %q, want the first submit's one", objs)
	}
}

// TestDownload: 202 and the job while it runs, 404 for an unknown job and
// for one that ended without an archive, 200 and the zip once there is one.
func TestDownload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v := e.submitFiles(`{"type":"t"}`, upFile{"in.txt", "in"}).want(t, http.StatusCreated).job(t)
	r := e.do("GET", "/api/v1/jobs/"+v.ID+"/download", nil).want(t, http.StatusAccepted)
	if got := r.job(t); got.ID != v.ID || got.State != domain.StateQueued {
		t.Errorf("202 body %+v", got)
	}
	e.do("GET", "/api/v1/jobs/"+domain.NewID()+"/download", nil).problem(t, http.StatusNotFound, "not-found")
	e.do("DELETE", "/api/v1/jobs/"+v.ID, nil).want(t, http.StatusOK)
	p := e.do("GET", "/api/v1/jobs/"+v.ID+"/download", nil).problem(t, http.StatusNotFound, "no-archive")
	if p.JobID != v.ID {
		t.Errorf("problem %+v", p)
	}

	// An archive as a worker stores it.
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	w, _ := zw.Create("out/a.txt")
	io.WriteString(w, "result")
	zw.Close()
	fs, err := files.Open(e.ctx, e.store.JS, e.store.Topo)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.PutResult(context.Background(), v.ID, bytes.NewReader(zb.Bytes())); err != nil {
		t.Fatal(err)
	}
	r = e.do("GET", "/api/v1/jobs/"+v.ID+"/download", nil).want(t, http.StatusOK)
	if ct, cd := r.header.Get("Content-Type"), r.header.Get("Content-Disposition"); ct != "application/zip" ||
		cd != `attachment; filename=`+v.ID+`.zip` && cd != `attachment; filename="`+v.ID+`.zip"` {
		t.Errorf("headers %q %q", ct, cd)
	}
	if !bytes.Equal(r.body, zb.Bytes()) {
		t.Errorf("downloaded %d bytes, want the %d stored", len(r.body), zb.Len())
	}
	var list fileList
	e.do("GET", "/api/v1/jobs/"+v.ID+"/files", nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Outputs) != 1 || list.Outputs[0].Name != files.ResultName || list.Outputs[0].Size != int64(zb.Len()) ||
		list.Download != "/api/v1/jobs/"+v.ID+"/download" {
		t.Errorf("files %+v", list)
	}
}

// TestFileSweep: files under an id no job has are deleted once older than
// the grace; a job's files stay.
func TestFileSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v := e.submitFiles(`{"type":"t"}`, upFile{"keep.txt", "k"}).want(t, http.StatusCreated).job(t)
	fs, err := files.Open(e.ctx, e.store.JS, e.store.Topo)
	if err != nil {
		t.Fatal(err)
	}
	orphan := domain.NewID()
	for _, n := range []string{"a", "b/c"} {
		if _, err := fs.PutInput(e.ctx, orphan, n, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
	}
	sw := e.eng.Files
	if n, err := sw.Sweep(e.ctx); err != nil || n != 0 {
		t.Fatalf("within the grace: swept %d, %v", n, err)
	}
	sw2 := newFileSweeperNoGrace(e)
	if n, err := sw2.Sweep(e.ctx); err != nil || n != 2 {
		t.Fatalf("swept %d, %v; want the orphan's 2", n, err)
	}
	if objs := e.objects(); len(objs) != 1 || objs[0] != files.InputKey(v.ID, "keep.txt") {
		t.Errorf("objects left %q", objs)
	}
}

func newFileSweeperNoGrace(e *env) interface {
	Sweep(context.Context) (int, error)
} {
	return engine.NewFileSweeper(e.store, 1, 0, nil)
}

// TestSubmitFilesEveryRole: a multipart submit is a submit: the same
// roles may, in their namespace only, and a refused one stores nothing.
func TestSubmitFilesEveryRole(t *testing.T) {
	e := newAuthEnv(t)
	for _, c := range []struct {
		job  string
		want [7]int // none, revoked, admin, prodA, workA, readA, prodB
	}{
		{`{"type":"t.f"}`, [7]int{401, 401, 201, 201, 403, 403, 201}},
		{`{"type":"t.f","namespace":"acme"}`, [7]int{401, 401, 201, 201, 403, 403, 403}},
	} {
		for i, who := range whos {
			before := len(e.objects())
			body, ct := multipartBody(t, c.job, upFile{"in.txt", "x"})
			r := e.as(who, "POST", "/api/v1/jobs", string(body), "Content-Type", ct)
			if r.status != c.want[i] {
				t.Errorf("%s as %s: %d %s, want %d", c.job, who, r.status, r.body, c.want[i])
			}
			if after := len(e.objects()); r.status >= 400 && after != before || r.status == 201 && after != before+1 {
				t.Errorf("%s as %s: %d, objects %d -> %d", c.job, who, r.status, before, after)
			}
		}
	}
}

func zipBytes(t *testing.T, names ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, n := range names {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, "content of "+n)
	}
	zw.Close()
	return b.Bytes()
}

// TestHTTPWorkerFiles: the worker holding a job downloads its inputs and
// uploads its archive; another worker may not; a bad archive is refused.
func TestHTTPWorkerFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxUpload = 4000 })
	v := e.submitFiles(`{"type":"hw.files"}`, upFile{"run.sh", "echo"}, upFile{"d/in.txt", "input"}).want(t, http.StatusCreated).job(t)
	wk := e.register(`{"name":"py","types":["hw.files"]}`)
	other := e.register(`{"name":"other","types":["hw.none"]}`)
	base := "/api/v1/jobs/" + v.ID
	// Not claimed yet: nobody holds it.
	e.do("GET", base+"/inputs/d/in.txt?worker_id="+wk, nil).problem(t, http.StatusConflict, "not-claimant")
	c := e.claim(wk, 10)
	if c.Job == nil || c.Job.ID != v.ID || len(c.Job.Files) != 2 {
		t.Fatalf("claimed %+v", c.Job)
	}
	r := e.do("GET", base+"/inputs/d/in.txt?worker_id="+wk, nil).want(t, http.StatusOK)
	if string(r.body) != "input" || r.header.Get("Digest") != digest("input") {
		t.Errorf("input %q %q", r.body, r.header.Get("Digest"))
	}
	e.do("GET", base+"/inputs/d/in.txt?worker_id="+other, nil).problem(t, http.StatusConflict, "not-claimant")
	e.do("GET", base+"/inputs/d/in.txt", nil).problem(t, http.StatusBadRequest, "invalid-input")
	e.do("GET", base+"/inputs/nope.txt?worker_id="+wk, nil).problem(t, http.StatusNotFound, "not-found")
	e.do("GET", base+"/inputs/../run.sh?worker_id="+wk, nil) // cleaned by the mux: never outside the job

	e.do("PUT", base+"/result?worker_id="+wk, "not a zip").problem(t, http.StatusBadRequest, "invalid-input")
	e.do("PUT", base+"/result?worker_id="+wk, zipBytes(t, "ok.txt", "../escape.txt")).problem(t, http.StatusBadRequest, "invalid-input")
	e.do("PUT", base+"/result?worker_id="+wk, zipBytes(t, "/abs.txt")).problem(t, http.StatusBadRequest, "invalid-input")
	e.do("PUT", base+"/result?worker_id="+wk, bytes.Repeat([]byte("x"), 5000)).problem(t, http.StatusRequestEntityTooLarge, "payload-too-large")
	good := zipBytes(t, "out/a.txt", "stdout.txt")
	e.do("PUT", base+"/result?worker_id="+other, good).problem(t, http.StatusConflict, "not-claimant")
	if objs := e.objects(); len(objs) != 2 {
		t.Fatalf("objects after refused archives: %q", objs)
	}
	e.do("PUT", base+"/result?worker_id="+wk, good).want(t, http.StatusOK)
	e.patch(v.ID, map[string]any{"worker_id": wk, "state": "running"}).want(t, http.StatusOK)
	e.patch(v.ID, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, http.StatusOK)
	r = e.do("GET", base+"/download", nil).want(t, http.StatusOK)
	if !bytes.Equal(r.body, good) {
		t.Error("downloaded archive is not the one uploaded")
	}
	// Ended: nobody holds it any more.
	e.do("PUT", base+"/result?worker_id="+wk, good).problem(t, http.StatusConflict, "invalid-transition")
}

// TestPythonWorkerFiles runs examples/python-worker/worker.py on a job
// with files: it downloads the inputs and uploads an archive of them
// upper-cased, which the download serves.
func TestPythonWorkerFiles(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python worker example is not run")
	}
	e := newEnv(t)
	v := e.submitFiles(`{"type":"py.upper"}`, upFile{"a.txt", "abc"}, upFile{"d/b.txt", "xyz"}).want(t, http.StatusCreated).job(t)
	script, err := filepath.Abs("../examples/python-worker/worker.py")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, "--url", e.ts.URL, "--types", "py.upper", "--max-jobs", "1", "--wait", "5")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("worker.py: %v\n%s", err, out)
	}
	if done := e.get(v.ID); done.State != domain.StateSucceeded || string(done.Result) != `{"files":2}` {
		t.Fatalf("job %+v\n%s", done, out)
	}
	r := e.do("GET", "/api/v1/jobs/"+v.ID+"/download", nil).want(t, http.StatusOK)
	zr, err := zip.NewReader(bytes.NewReader(r.body), int64(len(r.body)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := files.Extract(zr, dir, 1<<20); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"out/a.txt": "ABC", "out/d/b.txt": "XYZ"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", name, b, err)
		}
	}
}

// TestDashboardJobFiles: the job's page lists its files and links the
// download once there is an archive.
func TestDashboardJobFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v := e.submitFiles(`{"type":"t"}`, upFile{"dir/in put.txt", "abc"}).want(t, http.StatusCreated).job(t)
	page := string(e.do("GET", "/jobs/"+v.ID, nil).want(t, http.StatusOK).body)
	if !strings.Contains(page, `id="files"`) || !strings.Contains(page, "dir/in put.txt") || !strings.Contains(page, digest("abc")) ||
		strings.Contains(page, `id="download"`) {
		t.Fatalf("page without its files, or with a download:\n%s", page)
	}
	fs, err := files.Open(e.ctx, e.store.JS, e.store.Topo)
	if err != nil {
		t.Fatal(err)
	}
	fs.PutResult(e.ctx, v.ID, bytes.NewReader(zipBytes(t, "out/x")))
	page = string(e.do("GET", "/jobs/"+v.ID, nil).want(t, http.StatusOK).body)
	if !strings.Contains(page, `href="/api/v1/jobs/`+v.ID+`/download"`) || !strings.Contains(page, files.ResultName) {
		t.Fatalf("page without the download link:\n%s", page)
	}
}

// TestRetryWithFiles: a retry of a job with files is a new job with a copy
// of them under its own id.
func TestRetryWithFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v := e.submitFiles(`{"type":"t"}`, upFile{"run.sh", "echo"}, upFile{"d/in.txt", "in"}).want(t, http.StatusCreated).job(t)
	e.do("DELETE", "/api/v1/jobs/"+v.ID, nil).want(t, http.StatusOK)
	again := e.do("POST", "/api/v1/jobs/"+v.ID+"/retry", map[string]any{"idempotency_key": "r1"}).want(t, http.StatusCreated).job(t)
	if again.RetryOf != v.ID || fmt.Sprint(again.Files) != fmt.Sprint(v.Files) {
		t.Fatalf("retry %+v, files %+v; want %+v", again, again.Files, v.Files)
	}
	fs, err := files.Open(e.ctx, e.store.JS, e.store.Topo)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range again.Files {
		res, err := fs.Input(e.ctx, again.ID, f)
		if err != nil {
			t.Fatalf("%s of the retry: %v", f.Name, err)
		}
		res.Close()
	}
	// The same key again: the same retry, no more copies.
	same := e.do("POST", "/api/v1/jobs/"+v.ID+"/retry", map[string]any{"idempotency_key": "r1"}).want(t, http.StatusOK).job(t)
	if same.ID != again.ID {
		t.Errorf("second retry %s, want %s", same.ID, again.ID)
	}
	if objs := e.objects(); len(objs) != 4 {
		t.Errorf("objects %q, want the original's 2 and the retry's 2", objs)
	}
}
