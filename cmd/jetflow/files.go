package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jetflow/jetflow"
)

// inputFiles opens the files of `submit --file PATH...`: a file is named
// by its base name; a directory uploads its tree, each regular file named
// by its path under the directory (symbolic links and other special files
// are left out). close closes them all.
func inputFiles(paths []string) (files map[string]io.Reader, close func(), err error) {
	files = map[string]io.Reader{}
	var opened []*os.File
	close = func() {
		for _, f := range opened {
			_ = f.Close()
		}
	}
	add := func(name, path string) error {
		if _, dup := files[name]; dup {
			return fmt.Errorf("--file %s: two files would be named %q in the job's directory", path, name)
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		opened = append(opened, f)
		files[name] = f
		return nil
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			close()
			return nil, nil, err
		}
		if !st.IsDir() {
			err = add(filepath.Base(p), p)
		} else {
			err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return err
				}
				rel, err := filepath.Rel(p, path)
				if err != nil {
					return err
				}
				return add(filepath.ToSlash(rel), path)
			})
		}
		if err != nil {
			close()
			return nil, nil, err
		}
	}
	return files, close, nil
}

// jetflow download ID [-o FILE] [--wait]
func cmdDownload(c *cli, args []string) int {
	fs := c.clientFlags()
	var out string
	var wait bool
	fs.StringVar(&out, "o", "", "write the archive to `FILE` (default ID.zip; - for stdout)")
	fs.BoolVar(&wait, "wait", false, "wait until the job has ended")
	pos, ok := c.parse(args, 1, 1)
	if !ok {
		return exitUsage
	}
	id := pos[0]
	if out == "" {
		out = id + ".zip"
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		if wait {
			if _, err := cl.Wait(ctx, id); err != nil {
				return c.fail(err)
			}
		}
		var w io.Writer = c.out
		var tmp *os.File
		if out != "-" {
			var err error
			if tmp, err = os.CreateTemp(filepath.Dir(out), ".jetflow-download-*"); err != nil {
				return c.fail(err)
			}
			defer os.Remove(tmp.Name())
			defer tmp.Close()
			w = tmp
		}
		info, err := cl.Download(ctx, id, w)
		if errors.Is(err, jetflow.ErrNotEnded) {
			c.errorOf(err, "%v (add --wait to wait for it)", err)
			return exitFailed
		}
		if err != nil {
			return c.fail(err)
		}
		if tmp != nil {
			if err := tmp.Close(); err != nil {
				return c.fail(err)
			}
			if err := os.Rename(tmp.Name(), out); err != nil {
				return c.fail(err)
			}
			if c.json {
				c.printJSON(map[string]any{"file": out, "size": info.Size, "digest": info.Digest})
			} else {
				fmt.Fprintf(c.out, "%s\t%d bytes\t%s\n", out, info.Size, strings.TrimSpace(info.Digest))
			}
		}
		return exitOK
	})
}
