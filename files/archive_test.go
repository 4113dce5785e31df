package files_test

import (
	"archive/zip"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetflow/jetflow/files"
)

// zipOf is an archive with the given entries as a hostile tool could
// write them: names as they are, a mode per entry.
func zipOf(t *testing.T, entries ...struct {
	name string
	mode fs.FileMode
}) *zip.Reader {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Store}
		h.SetMode(e.mode)
		w, err := zw.CreateRaw(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, "")
	}
	zw.Close()
	zr, err := zip.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return zr
}

type ent = struct {
	name string
	mode fs.FileMode
}

// An archive's entries never land outside the directory it is extracted
// to: names with "..", absolute, with a backslash or not clean are
// refused, and so are symbolic links; what a refused archive wrote before
// stays inside.
func TestExtractNeverEscapes(t *testing.T) {
	for _, name := range []string{"../evil", "a/../../evil", "/etc/evil", `..\evil`, "a/./b", "a//b", "./a", "..", "a\x00b", ""} {
		parent := t.TempDir()
		dir := filepath.Join(parent, "target")
		os.Mkdir(dir, 0o700)
		err := files.Extract(zipOf(t, ent{"ok.txt", 0o600}, ent{name, 0o600}), dir, 1<<20)
		if err == nil {
			t.Errorf("%q: extracted", name)
		}
		if err := files.CheckEntryName(name); err == nil {
			t.Errorf("%q: CheckEntryName accepts it", name)
		}
		assertInside(t, parent, dir)
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "target")
	os.Mkdir(dir, 0o700)
	if err := files.Extract(zipOf(t, ent{"link", fs.ModeSymlink | 0o777}), dir, 1<<20); err == nil {
		t.Error("a symbolic link was extracted")
	}
	assertInside(t, parent, dir)
	if err := files.Extract(zipOf(t, ent{"d/", fs.ModeDir | 0o700}, ent{"d/e/f.txt", 0o600}), dir, 1<<20); err != nil {
		t.Errorf("a good archive: %v", err)
	}
}

// assertInside fails if anything but dir was made in parent.
func assertInside(t *testing.T, parent, dir string) {
	t.Helper()
	es, _ := os.ReadDir(parent)
	for _, e := range es {
		if filepath.Join(parent, e.Name()) != dir {
			t.Errorf("%s was written outside the target", e.Name())
		}
	}
}

// WriteZip writes clean relative names only, and does not follow a
// symbolic link.
func TestWriteZip(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("aaa"), 0o600)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("secret"), 0o600)
	os.Symlink(secret, filepath.Join(dir, "link"))
	var b bytes.Buffer
	if err := files.WriteZip(&b, []files.Entry{{Name: "out/a.txt", Path: filepath.Join(dir, "a.txt")}}); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil || len(zr.File) != 1 || zr.File[0].Name != "out/a.txt" {
		t.Fatalf("%v %v", zr, err)
	}
	for _, name := range []string{"../a.txt", "/a.txt", "a/../a.txt", `a\b`} {
		if err := files.WriteZip(io.Discard, []files.Entry{{Name: name, Path: filepath.Join(dir, "a.txt")}}); err == nil {
			t.Errorf("%q written", name)
		}
	}
	b.Reset()
	if err := files.WriteZip(&b, []files.Entry{{Name: "link", Path: filepath.Join(dir, "link")}}); err == nil ||
		strings.Contains(b.String(), "secret") {
		t.Errorf("a symbolic link was followed: %v", err)
	}
}

// Extract stops at its byte limit.
func TestExtractLimit(t *testing.T) {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, _ := zw.Create("big")
	w.Write(bytes.Repeat([]byte("x"), 10000))
	zw.Close()
	zr, _ := zip.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err := files.Extract(zr, t.TempDir(), 1000); err == nil {
		t.Error("10000 bytes extracted under a limit of 1000")
	}
}
