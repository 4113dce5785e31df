package gateway

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
)

// TestFilesOverCommands: files go up in chunks (file.put, file.submit)
// and come down in pieces (file.download) over the command protocol, with
// every size, name and digest checked and nothing written for a refusal:
// the job's files are stored under the id the engine chose, the chunks
// dropped once used and swept when left, and reads by offset resume from
// their cursor.
func TestFilesOverCommands(t *testing.T) {
	t.Parallel()
	e := &authEnv{env: newEnv(t), tok: map[string]string{}}
	ask := func(verb string, body any) (int, map[string]any) {
		t.Helper()
		return e.cmd("none", verb, body)
	}
	slug := func(out map[string]any) string {
		p, _ := out["error"].(map[string]any)
		return fmt.Sprint(p["type"], " ", p["field"])
	}
	big := bytes.Repeat([]byte("abcdefgh"), 100_000) // 800 kB: two chunks
	put := func(upload, name string, off int, data []byte) (int, map[string]any) {
		t.Helper()
		body := map[string]any{"name": name, "offset": off, "data": data}
		if upload != "" {
			body["upload"] = upload
		}
		return ask("file.put", body)
	}
	stageBig := func() string {
		t.Helper()
		st, out := put("", "data/big.bin", 0, big[:files.MaxChunkBytes])
		if st != 200 || out["next"] != float64(files.MaxChunkBytes) {
			t.Fatalf("file.put: %d %v", st, out)
		}
		up := out["upload"].(string)
		if st, out := put(up, "data/big.bin", files.MaxChunkBytes, big[files.MaxChunkBytes:]); st != 200 || out["next"] != float64(len(big)) {
			t.Fatalf("file.put: %d %v", st, out)
		}
		return up
	}
	staged := func(up string) []string {
		var out []string
		for _, o := range e.objects() {
			if strings.HasPrefix(o, up+"/") {
				out = append(out, o)
			}
		}
		return out
	}

	// Chunks that are refused store nothing.
	before := len(e.objects())
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"name": "a", "offset": 0, "data": bytes.Repeat([]byte("x"), files.MaxChunkBytes+1)}, engine.ProblemPayloadTooLarge + " <nil>"},
		{map[string]any{"name": "a", "offset": 5, "data": []byte{}}, engine.ProblemInvalidInput + " data"},
		{map[string]any{"name": "a", "offset": -1, "data": []byte("x")}, engine.ProblemInvalidInput + " offset"},
		{map[string]any{"name": "a", "offset": int64(DefaultMaxUpload), "data": []byte("x")}, engine.ProblemPayloadTooLarge + " <nil>"},
		{map[string]any{"name": "../a", "offset": 0, "data": []byte("x")}, "invalid-file-name <nil>"},
		{map[string]any{"name": "out/a", "offset": 0, "data": []byte("x")}, "invalid-file-name <nil>"},
		{map[string]any{"name": "a", "offset": 0, "data": []byte("x"), "upload": "up-nope"}, engine.ProblemInvalidInput + " upload"},
		{map[string]any{"name": "a", "offset": 0, "data": "not base64!"}, problemMalformedRequest + " data"},
		{map[string]any{"name": "a", "offset": 0, "data": []byte("x"), "bogus": 1}, problemMalformedRequest + " <nil>"},
	} {
		if st, out := ask("file.put", c.body); st < 400 || slug(out) != c.want {
			t.Errorf("file.put %v: %d %s, want %s", c.body["name"], st, slug(out), c.want)
		}
	}
	if after := len(e.objects()); after != before {
		t.Fatalf("refused chunks stored %d objects", after-before)
	}

	// A submit with files: stored under the job's id, the chunks dropped.
	up := stageBig()
	if st, out := put(up, "empty", 0, nil); st != 200 {
		t.Fatalf("an empty file: %d %v", st, out)
	}
	bigFile := map[string]any{"name": "data/big.bin", "size": len(big), "digest": digestOf(big)}
	emptyFile := map[string]any{"name": "empty", "size": 0, "digest": digestOf(nil)}
	events := e.eventCount()
	for _, c := range []struct {
		what  string
		files []map[string]any
		job   map[string]any
		want  string
	}{
		{"a wrong digest", []map[string]any{{"name": "data/big.bin", "size": len(big), "digest": digestOf([]byte("x"))}}, map[string]any{"type": "t.f"}, engine.ProblemInvalidInput + " files"},
		{"a wrong size", []map[string]any{{"name": "data/big.bin", "size": len(big) + 1, "digest": digestOf(big)}}, map[string]any{"type": "t.f"}, engine.ProblemInvalidInput + " files"},
		{"a file never staged", []map[string]any{{"name": "other", "size": 1, "digest": digestOf([]byte("x"))}}, map[string]any{"type": "t.f"}, engine.ProblemInvalidInput + " files"},
		{"no files", []map[string]any{}, map[string]any{"type": "t.f"}, engine.ProblemInvalidInput + " files"},
		{"a file twice", []map[string]any{bigFile, bigFile}, map[string]any{"type": "t.f"}, "invalid-file-name <nil>"},
		{"a bad job", []map[string]any{bigFile}, map[string]any{"type": "t.f", "max_retries": -1}, engine.ProblemInvalidInput + " max_retries"},
		{"a job field of the wrong type", []map[string]any{bigFile}, map[string]any{"type": "t.f", "max_retries": "x"}, problemMalformedRequest + " max_retries"},
		{"an empty namespace", []map[string]any{bigFile}, map[string]any{"type": "t.f", "namespace": ""}, "invalid-namespace namespace"},
	} {
		st, out := ask("file.submit", map[string]any{"upload": up, "files": c.files, "job": c.job})
		if st < 400 || slug(out) != c.want {
			t.Errorf("file.submit with %s: %d %s, want %s", c.what, st, slug(out), c.want)
		}
	}
	if e.eventCount() != events {
		t.Fatal("a refused file.submit wrote events")
	}
	for _, o := range e.objects() {
		if strings.Contains(o, "/in/") {
			t.Fatalf("a refused file.submit left %s", o)
		}
	}
	st, out := ask("file.submit", map[string]any{"upload": up, "files": []map[string]any{bigFile, emptyFile},
		"job": map[string]any{"type": "t.f", "idempotency_key": "k1"}})
	if st != 200 || out["created"] != true {
		t.Fatalf("file.submit: %d %v", st, out)
	}
	job := out["job"].(map[string]any)
	id := job["id"].(string)
	if id != domain.KeyedID("default", "k1") || len(job["files"].([]any)) != 2 {
		t.Fatalf("job %v", job)
	}
	if left := staged(up); len(left) != 0 {
		t.Errorf("chunks left after the submit: %v", left)
	}
	objs := e.objects()
	if !slices.Contains(objs, files.InputKey(id, "data/big.bin")) || !slices.Contains(objs, files.InputKey(id, "empty")) {
		t.Errorf("objects %v", objs)
	}
	// The key names the job: it is the answer, and nothing is written.
	up2 := stageBig()
	events = e.eventCount()
	st, out = ask("file.submit", map[string]any{"upload": up2, "files": []map[string]any{bigFile}, "job": map[string]any{"type": "t.f", "idempotency_key": "k1"}})
	if st != 200 || out["created"] != false || out["job"].(map[string]any)["id"] != id || e.eventCount() != events {
		t.Fatalf("again: %d %v", st, out)
	}
	// Chunks left (a client that never submitted) are swept after the
	// grace, with no job to wait for.
	if n, err := e.eng.Files.Sweep(e.ctx); err != nil || n != 0 || len(staged(up2)) != 2 {
		t.Fatalf("within the grace: swept %d %v, left %v", n, err, staged(up2))
	}
	if n, err := newFileSweeperNoGrace(e.env).Sweep(e.ctx); err != nil || n != 2 || len(staged(up2)) != 0 {
		t.Fatalf("swept %d %v, left %v", n, err, staged(up2))
	}

	// Reads by offset: a job's archive once it ended.
	zip := bytes.Repeat(zipBytes(t, "a.txt", "b.txt"), 1)
	fs, err := e.store.Files(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Cancel(e.ctx, id, "done"); err != nil {
		t.Fatal(err)
	}
	archive := append(bytes.Repeat([]byte("z"), 700_000), zip...)
	if _, err := fs.PutResult(e.ctx, id, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	var got []byte
	cursor, off := "", 0
	for i := 0; ; i++ {
		body := map[string]any{"id": id, "offset": off, "limit": 300_000}
		if cursor != "" {
			body["cursor"] = cursor
		}
		st, out := ask("file.download", body)
		if st != 200 {
			t.Fatalf("piece %d: %d %v", i, st, out)
		}
		data, _ := base64.StdEncoding.DecodeString(out["data"].(string))
		got = append(got, data...)
		off, cursor = int(out["next"].(float64)), out["cursor"].(string)
		if out["eof"] == true {
			break
		}
		if i > 10 {
			t.Fatal("no end")
		}
	}
	if !bytes.Equal(got, archive) {
		t.Fatalf("read %d bytes, want %d", len(got), len(archive))
	}
	// Without a cursor, from the middle.
	st, out = ask("file.download", map[string]any{"id": id, "offset": 250_000, "limit": 100_000})
	data, _ := base64.StdEncoding.DecodeString(fmt.Sprint(out["data"]))
	if st != 200 || !bytes.Equal(data, archive[250_000:350_000]) {
		t.Fatalf("from the middle: %d, %d bytes", st, len(data))
	}
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"id": id, "offset": len(archive) + 1}, engine.ProblemInvalidInput + " offset"},
		{map[string]any{"id": id, "offset": 0, "cursor": "nope"}, engine.ProblemBadCursor + " cursor"},
		{map[string]any{"id": id, "offset": 0, "limit": files.MaxChunkBytes + 1}, engine.ProblemInvalidInput + " limit"},
	} {
		if st, out := ask("file.download", c.body); st < 400 || slug(out) != c.want {
			t.Errorf("file.download %v: %d %s, want %s", c.body, st, slug(out), c.want)
		}
	}
	// A cursor of the archive an attempt replaced: the file changed.
	st, out = ask("file.download", map[string]any{"id": id, "offset": 0, "limit": 10})
	if st != 200 {
		t.Fatal(out)
	}
	if _, err := fs.PutResult(e.ctx, id, bytes.NewReader(zip)); err != nil {
		t.Fatal(err)
	}
	if st, out := ask("file.download", map[string]any{"id": id, "offset": 10, "cursor": out["cursor"]}); st != http.StatusConflict {
		t.Errorf("a replaced archive: %d %v", st, out)
	}
}
