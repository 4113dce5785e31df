package shell

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jetflow/jetflow"
)

// maxEvents bounds the ::event lines of one attempt that become events.
const maxEvents = 1000

// budget is what the command may still write: its logs are counted as they
// are written, its files as the last look at its directory found them.
type budget struct {
	limit   int64
	logs    atomic.Int64 // bytes of stdout and stderr
	written atomic.Int64 // of those, the bytes written to stdout.txt and stderr.txt
	files   atomic.Int64 // bytes of the directory's files, less those before the run, and what the logs hold beyond written
	over    chan struct{}
	once    sync.Once
}

func newBudget(limit int64) *budget { return &budget{limit: limit, over: make(chan struct{})} }

func (b *budget) check() bool {
	if b.logs.Load()+b.files.Load() <= b.limit {
		return true
	}
	b.once.Do(func() { close(b.over) })
	return false
}

// watchDir looks at dir's size every interval until stop is closed; the
// files that were there before (base bytes) and the logs are not counted.
func (b *budget) watchDir(dir string, base int64, interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		b.look(dir, base)
		if !b.check() {
			return
		}
	}
}

// look counts what the directory holds now: its files but those before the
// run, and the bytes in stdout.txt and stderr.txt that did not come through
// the pipes (the command wrote to the files itself).
func (b *budget) look(dir string, base int64) {
	other, logs := dirBytes(dir)
	b.files.Store(other - base + max(0, logs-b.written.Load()))
}

// dirBytes is the size of the regular files under dir but the logs at its
// top (other), and of the logs, links not followed.
func dirBytes(dir string) (other, logs int64) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if filepath.Dir(path) == dir && (d.Name() == StdoutFile || d.Name() == StderrFile) {
			logs += info.Size()
		} else {
			other += info.Size()
		}
		return nil
	})
	return other, logs
}

// logFile is stdout.txt or stderr.txt: written while the budget lasts, with
// the last TailBytes kept.
type logFile struct {
	f      *os.File
	budget *budget
	tail   []byte
	err    error
}

func (l *logFile) Write(p []byte) (int, error) {
	l.tail = append(l.tail, p...)
	if len(l.tail) > 2*TailBytes {
		l.tail = append(l.tail[:0], l.tail[len(l.tail)-TailBytes:]...)
	}
	l.budget.logs.Add(int64(len(p)))
	if l.err != nil || !l.budget.check() {
		return len(p), nil // the process group is being killed: drained, not kept
	}
	var n int
	n, l.err = l.f.Write(p)
	l.budget.written.Add(int64(n))
	return len(p), nil
}

// Tail is the last TailBytes written, as valid UTF-8 without a cut rune
// at its start.
func (l *logFile) Tail() string { return tail(l.tail) }

func tail(b []byte) string {
	if len(b) > TailBytes {
		b = b[len(b)-TailBytes:]
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// drainStderr copies r to l until r ends.
func drainStderr(r io.Reader, l *logFile) {
	_, _ = io.Copy(l, r)
}

// stdoutReader splits the command's stdout into directives, which drive
// the job, and the rest, which goes to stdout.txt.
type stdoutReader struct {
	ctx    context.Context
	job    *jetflow.RawJob
	log    *slog.Logger
	out    *logFile
	last   []byte // the last non-blank line not a directive, if short
	events int
}

// maxLastLine bounds the line read as a retry delay.
const maxLastLine = 256

func (s *stdoutReader) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var cur []byte   // the current line so far, unless too long
	tooLong := false // the current line is longer than maxLastLine
	midLine := false // the current line began in an earlier chunk
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			complete := chunk[len(chunk)-1] == '\n'
			if midLine || !complete || !s.directive(chunk) {
				_, _ = s.out.Write(chunk)
				if !tooLong {
					cur = append(cur, chunk...)
					tooLong = len(cur) > maxLastLine
				}
			}
			midLine = !complete
			if complete {
				s.endLine(cur, tooLong)
				cur, tooLong = cur[:0], false
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			s.endLine(cur, tooLong)
			return
		}
	}
}

// endLine notes a line that ended: the last one that is not blank is the
// delay of an exit ExitRetryLater (a long one is none).
func (s *stdoutReader) endLine(line []byte, tooLong bool) {
	if line = bytes.TrimSpace(line); len(line) > 0 || tooLong {
		s.last = bytes.Clone(line)
		if tooLong {
			s.last = nil
		}
	}
}

// directive acts on a ::progress or ::event line and reports whether line
// was one (a malformed one is an ordinary line).
func (s *stdoutReader) directive(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("::")) {
		return false
	}
	text := strings.TrimRight(string(line), "\r\n")
	verb, rest, _ := strings.Cut(text[2:], " ")
	switch verb {
	case "progress":
		frac, msg, _ := strings.Cut(rest, " ")
		cs, ts, ok := strings.Cut(frac, "/")
		cur, err1 := strconv.ParseInt(cs, 10, 64)
		total, err2 := strconv.ParseInt(ts, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return false
		}
		if err := s.job.Progress(cur, total, msg); err != nil {
			s.log.Debug("::progress refused", "line", text, "err", err)
		}
		return true
	case "event":
		name, msg, _ := strings.Cut(rest, " ")
		if name == "" {
			return false
		}
		if s.events++; s.events > maxEvents {
			if s.events == maxEvents+1 {
				s.log.Warn("::event lines beyond the limit are ignored", "limit", maxEvents)
			}
			return true
		}
		if err := s.job.Emit(s.ctx, name, "info", msg, nil); err != nil {
			s.log.Debug("::event refused", "line", text, "err", err)
		}
		return true
	}
	return false
}

// retryDelay is the delay on the last line of stdout, a Go duration or
// seconds; DefaultRetryLaterDelay if it is neither.
func retryDelay(last []byte) time.Duration {
	s := string(last)
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 && f < float64(1<<62)/float64(time.Second) {
		return time.Duration(f * float64(time.Second))
	}
	return DefaultRetryLaterDelay
}

// listOutputs lists the regular files under dir, relative and
// slash-separated; symbolic links (and what they point to) are left out,
// and a dir that is not a directory (the command replaced it with a link)
// has none.
func listOutputs(dir string) []File {
	if info, err := os.Lstat(dir); err != nil || !info.IsDir() {
		return nil
	}
	var files []File
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil // WalkDir does not descend into links, only into directories
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || !filepath.IsLocal(rel) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		files = append(files, File{Name: filepath.ToSlash(rel), Size: info.Size()})
		return nil
	})
	return files
}
