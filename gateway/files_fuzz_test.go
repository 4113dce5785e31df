package gateway

import (
	"bytes"
	"io"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// FuzzUpload runs the multipart decoder of a submit with files on
// arbitrary bodies: it never panics, every refusal is the client's (4xx),
// and every file it accepts has a name commands.CheckFileName accepts,
// none twice, within the limits.
func FuzzUpload(f *testing.F) {
	const boundary = "BOUNDARY"
	seed := func(parts ...string) string {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString("--" + boundary + "\r\n" + p + "\r\n")
		}
		b.WriteString("--" + boundary + "--\r\n")
		return b.String()
	}
	job := "Content-Disposition: form-data; name=\"job\"\r\n\r\n{\"type\":\"t\"}"
	file := func(name, content string) string {
		return "Content-Disposition: form-data; name=\"file\"; filename=\"" + name + "\"\r\n\r\n" + content
	}
	f.Add(seed(job))
	f.Add(seed(job, file("run.sh", "echo hi"), file("a/b.txt", "x")))
	f.Add(seed(job, file("../x", "x")))
	f.Add(seed(job, file("a", "x"), file("a", "y")))
	f.Add(seed(file("a", "x"), job))
	f.Add(seed(job, "Content-Disposition: form-data; name=\"file\"; filename*=utf-8''a%2Fb\r\n\r\nx"))
	f.Add(seed(job, file("big", strings.Repeat("x", 300))))
	f.Add("--" + boundary + "\r\nContent-Disposition: form-data; name=\"job\"\r\n\r\n{")
	lim := uploadLimits{maxJob: 1 << 10, maxUpload: 256, maxFiles: 4}
	f.Fuzz(func(t *testing.T, body string) {
		var stored []string
		var total int64
		u := upload{
			check: func(*commands.SubmitRequest) error { return nil },
			put: func(name string, r io.Reader) (domain.FileRef, error) {
				n, err := io.Copy(io.Discard, r)
				total += n
				if err == nil {
					stored = append(stored, name)
				}
				return domain.FileRef{Name: name, Size: n, Digest: "d"}, err
			},
		}
		req, refs, err := readUpload(multipart.NewReader(bytes.NewReader([]byte(body)), boundary), lim, u)
		if err != nil {
			if p := problemOf(err); p.Status < 400 || p.Status > 499 {
				t.Fatalf("not a client error: %d %v", p.Status, err)
			}
			return
		}
		if req == nil || len(refs) != len(stored) || len(refs) > lim.maxFiles || total > lim.maxUpload {
			t.Fatalf("accepted %d files (%d stored, %d bytes) of a request %v", len(refs), len(stored), total, req)
		}
		if err := commands.CheckFileNames(stored, lim.maxFiles); err != nil {
			t.Fatalf("accepted bad names %q: %v", stored, err)
		}
	})
}
