package files

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode"
)

// Entry is a file to put in an archive: its name in the archive and the
// path it is read from.
type Entry struct {
	Name string
	Path string
}

// CheckEntryName checks the name of an archive's entry: relative,
// slash-separated, clean (path.Clean leaves it as it is), without "..",
// a backslash or a control character. An entry with such a name stays
// inside the directory it is extracted to.
func CheckEntryName(name string) error {
	switch {
	case name == "":
		return errors.New("an empty entry name")
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("entry %q: absolute", name)
	case strings.ContainsRune(name, '\\'), strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("entry %q: a backslash or a control character", name)
	case path.Clean(name) != name:
		return fmt.Errorf("entry %q: not a clean path", name)
	case name == ".." || strings.HasPrefix(name, "../"):
		return fmt.Errorf("entry %q: outside the archive's directory", name)
	}
	return nil
}

// WriteZip writes the entries to w as a zip archive. Each entry must be a
// regular file (a symbolic link is not followed: it is refused at open)
// with a name CheckEntryName accepts.
func WriteZip(w io.Writer, entries []Entry) error {
	zw := zip.NewWriter(w)
	for _, e := range entries {
		if err := CheckEntryName(e.Name); err != nil {
			return err
		}
		if err := addFile(zw, e); err != nil {
			return err
		}
	}
	return zw.Close()
}

func addFile(zw *zip.Writer, e Entry) error {
	f, err := os.OpenFile(e.Path, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return fmt.Errorf("archive %s: %w", e.Name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("archive %s: %w", e.Name, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("archive %s: not a regular file", e.Name)
	}
	hdr, err := zip.FileInfoHeader(st)
	if err != nil {
		return err
	}
	hdr.Name, hdr.Method = e.Name, zip.Deflate
	zw2, err := zw.CreateHeader(hdr)
	if err != nil {
		return err
	}
	_, err = io.Copy(zw2, f)
	return err
}

// Extract writes a zip archive's regular files under dir, refusing an
// entry whose name CheckEntryName does not accept, any entry that is not a
// regular file or a directory (a symbolic link), and more than maxBytes in
// all (what the entries hold, not what their headers say).
func Extract(zr *zip.Reader, dir string, maxBytes int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	left := maxBytes
	for _, f := range zr.File {
		name := strings.TrimSuffix(f.Name, "/")
		if err := CheckEntryName(name); err != nil {
			return err
		}
		mode := f.Mode()
		if mode.IsDir() {
			if err := root.MkdirAll(name, 0o700); err != nil {
				return err
			}
			continue
		}
		if !mode.IsRegular() {
			return fmt.Errorf("entry %q: not a regular file (%s)", f.Name, mode.Type())
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o700); err != nil {
				return err
			}
		}
		n, err := extractOne(root, name, f, left)
		if err != nil {
			return err
		}
		left -= n
	}
	return nil
}

func extractOne(root *os.Root, name string, f *zip.File, left int64) (int64, error) {
	rc, err := f.Open()
	if err != nil {
		return 0, fmt.Errorf("entry %q: %w", f.Name, err)
	}
	defer rc.Close()
	out, err := root.OpenFile(filepath.FromSlash(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, io.LimitReader(rc, left+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > left {
		err = fmt.Errorf("entry %q: the archive holds more than the limit", f.Name)
	}
	return n, err
}
