package files

import (
	"archive/zip"
	"fmt"
	"io"
)

// CheckArchive refuses what is not a zip whose entries are regular files
// and directories with names CheckEntryName accepts: what a worker may
// store as a job's result archive (over HTTP or the command protocol).
func CheckArchive(f io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(f, size)
	if err != nil {
		return fmt.Errorf("not a zip archive: %v", err)
	}
	for _, e := range zr.File {
		name := e.Name
		if e.Mode().IsDir() && len(name) > 1 && name[len(name)-1] == '/' {
			name = name[:len(name)-1]
		}
		if err := CheckEntryName(name); err != nil {
			return err
		}
		if m := e.Mode(); !m.IsRegular() && !m.IsDir() {
			return fmt.Errorf("entry %q: not a regular file or a directory (%s)", e.Name, m.Type())
		}
	}
	return nil
}
