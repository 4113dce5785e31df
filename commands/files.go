package commands

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jetflow/jetflow/internal/domain"
)

// Limits of a job's input files.
const (
	// MaxFiles bounds the input files of one job (a gateway may set a
	// lower limit).
	MaxFiles = 1000
	// MaxFileNameBytes bounds a file's name, its directories included.
	MaxFileNameBytes = 512
	maxDigestLen     = 128
)

// ErrInvalidFileName is the sentinel of a refused file name (problem
// invalid-file-name, 400); a *fileNameError says which and why.
var ErrInvalidFileName = &registryError{slug: "invalid-file-name", base: ErrInvalidInput}

// fileNameError is a refused input file name. It matches
// ErrInvalidFileName and ErrInvalidInput.
type fileNameError struct {
	Name   string
	Reason string
}

func (e *fileNameError) Error() string { return fmt.Sprintf("file name %q: %s", e.Name, e.Reason) }
func (e *fileNameError) Unwrap() error { return ErrInvalidFileName }

// reservedNames are the names a shell job's directory already holds
// (shell.PayloadFile, InputsFile, OutputDir, TmpDir, StdoutFile,
// StderrFile): an input file must not take them, nor be under out/ or tmp/.
var reservedNames = map[string]bool{"payload.json": true, "inputs.json": true, "out": true, "tmp": true, "stdout.txt": true, "stderr.txt": true}

// CheckFileName checks the name of one input file: a relative,
// slash-separated path in the job's directory. It must not be empty,
// absolute, have an empty, "." or ".." segment, a backslash, a NUL or
// another control character, be invalid UTF-8 or longer than
// MaxFileNameBytes, or start with a name the job's directory reserves.
func CheckFileName(name string) error {
	bad := func(reason string) error { return &fileNameError{Name: name, Reason: reason} }
	switch {
	case name == "":
		return bad("is empty")
	case len(name) > MaxFileNameBytes:
		return bad(fmt.Sprintf("longer than %d bytes", MaxFileNameBytes))
	case !utf8.ValidString(name):
		return bad("is not valid UTF-8")
	case strings.ContainsFunc(name, unicode.IsControl):
		return bad("contains a NUL or a control character")
	case strings.ContainsRune(name, '\\'):
		return bad(`contains a backslash; separate directories with "/"`)
	case strings.HasPrefix(name, "/"):
		return bad("is absolute; want a path relative to the job's directory")
	}
	for _, seg := range strings.Split(name, "/") {
		switch seg {
		case "":
			return bad("has an empty segment (a trailing or doubled /)")
		case ".", "..":
			return bad(fmt.Sprintf("has a %q segment; a file stays inside the job's directory", seg))
		}
	}
	if first, _, _ := strings.Cut(name, "/"); reservedNames[first] {
		return bad(fmt.Sprintf("%q is reserved in the job's directory (payload.json, out/, tmp/, stdout.txt, stderr.txt)", first))
	}
	return nil
}

// CheckFileNames checks a job's file names, each by CheckFileName, and
// together (FileSet): at most limit of them (0: MaxFiles), none repeated,
// none both a file and a directory of another ("a" and "a/b").
func CheckFileNames(names []string, limit int) error {
	set := NewFileSet(limit)
	for _, n := range names {
		if err := set.Add(n); err != nil {
			return err
		}
	}
	return nil
}

// fileSet checks a job's file names as they come (a streamed upload).
type fileSet struct {
	limit       int
	files, dirs map[string]bool
}

// NewFileSet returns an empty set that takes at most limit names (0 or
// more than MaxFiles: MaxFiles).
func NewFileSet(limit int) *fileSet {
	if limit <= 0 || limit > MaxFiles {
		limit = MaxFiles
	}
	return &fileSet{limit: limit, files: map[string]bool{}, dirs: map[string]bool{}}
}

// Len is how many names the set holds.
func (s *fileSet) Len() int { return len(s.files) }

// Add checks one more name: by CheckFileName, not past the limit, not
// repeated, not a file where another's directory is or the other way
// round.
func (s *fileSet) Add(n string) error {
	if len(s.files) >= s.limit {
		return inputErr("files", "more than %d files", s.limit)
	}
	if err := CheckFileName(n); err != nil {
		return err
	}
	if s.files[n] {
		return &fileNameError{Name: n, Reason: "is given twice"}
	}
	if s.dirs[n] {
		return &fileNameError{Name: n, Reason: "is also the directory of another file"}
	}
	for i := 0; i < len(n); i++ {
		if n[i] == '/' && s.files[n[:i]] {
			return &fileNameError{Name: n, Reason: fmt.Sprintf("is under %q, which is a file", n[:i])}
		}
	}
	for i := 0; i < len(n); i++ {
		if n[i] == '/' {
			s.dirs[n[:i]] = true
		}
	}
	s.files[n] = true
	return nil
}

// checkFiles checks the files a submit records in the job's spec.
func checkFiles(files []domain.FileRef) error {
	names := make([]string, len(files))
	for i, f := range files {
		if f.Size < 0 || f.Digest == "" || len(f.Digest) > maxDigestLen {
			return valueErr("files", f.Name, "want a size of 0 or more and a digest of 1-%d bytes", maxDigestLen)
		}
		names[i] = f.Name
	}
	return CheckFileNames(names, MaxFiles)
}

// FileUpload is an input file to store with a job at submit: its name in
// the job's directory and its content (Go clients; see jetflow.Files).
type FileUpload struct {
	Name   string
	Reader io.Reader
}
