package jetflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestClientFiles: a Go client submits input files with the job, a handler
// reads them and stores a result, Download writes it once the job ended; a
// bad name stores nothing. (A token client's files: TestEveryMethodBothClients.)
func TestClientFiles(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	w := jetflow.NewWorker(cl, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	w.Handle("files.cat", jetflow.HandlerFunc(func(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
		var all bytes.Buffer
		for _, f := range job.Record().Files {
			r, err := cl.OpenInput(ctx, job.ID, f)
			if err != nil {
				return nil, err
			}
			io.Copy(&all, r)
			r.Close()
		}
		<-release
		if _, err := cl.PutResult(ctx, job.ID, &all); err != nil {
			return nil, err
		}
		return []byte(`"ok"`), nil
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })

	job, err := cl.Submit(ctx, "files.cat", nil, jetflow.Files(map[string]io.Reader{
		"b/2.txt": strings.NewReader("two"), "a.txt": strings.NewReader("one,")}))
	if err != nil {
		t.Fatal(err)
	}
	if len(job.Files) != 2 || job.Files[0].Name != "a.txt" || job.Files[1].Size != 3 {
		t.Fatalf("files %+v", job.Files)
	}
	if _, err := cl.Download(ctx, job.ID, io.Discard); !errors.Is(err, jetflow.ErrNotEnded) {
		t.Errorf("download before the end: %v", err)
	}
	close(release)
	if done, err := cl.Wait(ctx, job.ID); err != nil || done.State != jetflow.Succeeded {
		t.Fatalf("%+v %v", done, err)
	}
	var got bytes.Buffer
	if _, err := cl.Download(ctx, job.ID, &got); err != nil || got.String() != "one,two" {
		t.Errorf("downloaded %q, %v", got.String(), err)
	}

	if _, err := cl.Submit(ctx, "files.cat", nil, jetflow.Files(map[string]io.Reader{
		"ok": strings.NewReader("x"), "../x": strings.NewReader("x")})); !errors.Is(err, commands.ErrInvalidFileName) {
		t.Errorf("a bad name: %v", err)
	}
	if _, err := cl.Download(ctx, domain.NewID(), io.Discard); !errors.Is(err, jetflow.ErrNotFound) {
		t.Errorf("download of no job: %v", err)
	}
}

// SubmitMany with files stores each request's files before its submit.
func TestSubmitManyFiles(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var reqs []*jetflow.SubmitRequest
	for _, n := range []string{"a", "b"} {
		r, err := jetflow.NewRequest("files.many", nil, jetflow.Files(map[string]io.Reader{n + ".txt": strings.NewReader(n)}))
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	plain, _ := jetflow.NewRequest("files.many", nil)
	reqs = append(reqs, plain)
	infos, errs := cl.SubmitMany(ctx, reqs)
	for i, want := range []int{1, 1, 0} {
		if errs[i] != nil || len(infos[i].Files) != want {
			t.Errorf("request %d: %+v %v", i, infos[i], errs[i])
		}
	}
}
