package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
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
			progress = &progressWriter{w: w, errw: c.errw}
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

// progressWriter tells on a terminal how much of an export was written,
// at every MiB.
type progressWriter struct {
	w    io.Writer
	errw io.Writer
	n    int64
	told int64
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	if p.n-p.told >= 1<<20 {
		p.told = p.n
		fmt.Fprintf(p.errw, "\rexported %.1f MiB", float64(p.n)/(1<<20))
	}
	return n, err
}

func (p *progressWriter) done() {
	if p.told > 0 {
		fmt.Fprintf(p.errw, "\rexported %.1f MiB\n", float64(p.n)/(1<<20))
	}
}
