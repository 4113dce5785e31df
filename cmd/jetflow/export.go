package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// exportTime parses --since and --until: RFC 3339, or a date (UTC).
func exportTime(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, true
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// cmdExport writes a verifiable copy of the event log (docs/audit.md).
func cmdExport(c *cli, args []string) int {
	fs := c.clientFlags()
	var since, until, ns, out string
	fs.StringVar(&since, "since", "", "the first instant exported: RFC 3339 (2026-11-26T14:00:00Z) or a date (UTC); default: the log's beginning")
	fs.StringVar(&until, "until", "", "the last instant exported; default: now")
	fs.StringVar(&ns, "namespace", "", "only this namespace's jobs' events, with inclusion proofs in the checkpoints (nothing of another namespace)")
	fs.StringVar(&out, "o", "", "write to this file (default: stdout)")
	if _, ok := c.parse(args, 0, 0); !ok {
		return exitUsage
	}
	from, okSince := exportTime(since)
	to, okUntil := exportTime(until)
	if !c.checkFlags(
		when("since", !okSince, "want RFC 3339 (2026-11-26T14:00:00Z) or a date (2026-11-26)"),
		when("until", !okUntil, "want RFC 3339 (2026-11-26T14:00:00Z) or a date (2026-11-26)"),
		when("until", okSince && okUntil && !from.IsZero() && !to.IsZero() && to.Before(from), "before --since"),
		when("namespace", !domain.ValidNamespace(ns), "not a namespace name"),
		when("o", out == "", "must not be empty"),
	) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		var w io.Writer = c.out
		var f *os.File
		if out != "" {
			var err error
			if f, err = os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
				c.errorf("-o %s: %v", out, err)
				return exitUsage
			}
			w = f
		}
		var progress *progressWriter
		if f != nil && isTerminal(c.errw) {
			progress = &progressWriter{w: w, errw: c.errw, atStart: true}
			// The log's range, for the bar (best effort, a second at most:
			// a NATS user without the stream's info gets the bytes).
			if js, err := jetstream.New(cl.Conn()); err == nil {
				ictx, cancel := context.WithTimeout(ctx, time.Second)
				if st, err := js.Stream(ictx, streams.EventsStream); err == nil {
					progress.first, progress.last = st.CachedInfo().State.FirstSeq, st.CachedInfo().State.LastSeq
				}
				cancel()
			}
			w = progress
		}
		st, err := cl.AuditExport(ctx, jetflow.AuditExportScope{Since: from, Until: to, Namespace: ns}, w)
		if f != nil {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if progress != nil {
			progress.done()
		}
		if err != nil {
			if f != nil {
				os.Remove(out) // ours (created here): no export cut short is left behind
			}
			return c.fail(err)
		}
		if f != nil {
			if c.json {
				c.printJSON(st)
			} else {
				fmt.Fprintf(c.out, "exported %d events, %d checkpoints, %d proofs to %s; %d events after the last checkpoint are not covered yet\n",
					st.Events, st.Checkpoints, st.Proofs, out, st.Uncovered)
			}
		}
		return exitOK
	})
}

// progressWriter draws on a terminal how far through the log an export
// is: the stream sequence of the last event line written (its "seq"),
// between the log's first and last when the export began (a bar), or, if
// those are not known, the bytes written.
type progressWriter struct {
	w           io.Writer
	errw        io.Writer
	first, last uint64 // the log's range when the export began (0, 0: unknown)
	n           int64
	seq         uint64
	head        []byte // the start of the line being written (its kind and seq)
	atStart     bool
	shown       time.Time
}

// lineHead is how much of a line's start progressWriter reads: enough for
// {"kind":"event","seq":N.
const lineHead = 64

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	for _, c := range b[:n] {
		switch {
		case c == '\n':
			p.line()
			p.head, p.atStart = p.head[:0], true
		case p.atStart && len(p.head) < lineHead:
			p.head = append(p.head, c)
		}
	}
	if time.Since(p.shown) >= 100*time.Millisecond {
		p.shown = time.Now()
		p.draw("")
	}
	return n, err
}

// line reads the seq of an event line's head.
func (p *progressWriter) line() {
	const key = `"kind":"event","seq":`
	i := bytes.Index(p.head, []byte(key))
	if i < 0 {
		return
	}
	rest := p.head[i+len(key):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	if seq, err := strconv.ParseUint(string(rest[:j]), 10, 64); err == nil {
		p.seq = seq
	}
}

func (p *progressWriter) draw(end string) {
	mib := float64(p.n) / (1 << 20)
	if p.last > p.first && p.seq >= p.first {
		pct := 100 * float64(p.seq-p.first+1) / float64(p.last-p.first+1)
		fmt.Fprintf(p.errw, "\r%s %5.1f%% of the log (event %d of %d..%d), %.1f MiB%s", progressBar(pct), pct, p.seq, p.first, p.last, mib, end)
		return
	}
	fmt.Fprintf(p.errw, "\rexported %.1f MiB%s", mib, end)
}

func (p *progressWriter) done() { p.draw("\n") }
