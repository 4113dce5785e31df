package gateway

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/projections"
)

// Search: GET /jobs (and the dashboard's lists) take, besides state,
// queue, type, namespace and parent:
//
//	id=01J...            the id begins with it
//	tag=t                a tag of the job
//	error_code=TIMEOUT   the last error's code
//	error=text           text of the last error's code or message (any case)
//	payload=customer=42  a payload field (a path: customer.id, items.0.sku) equal to a value; repeatable
//	since=1h             finished in the last 1h (a Go duration, or 1d, 7d)
//	finished_after, finished_before   RFC 3339 times
//
// Everything but the payload is decided on the index's summaries; a
// payload search reads the records of the index's candidates, at most
// searchBudget a request, and pages with a cursor like any list.

// searchBudget is the most records one page of a payload search reads.
var searchBudget = 10000

// searchChunk is how many candidates are read at once.
const searchChunk = 500

// searchParams reads a search from a list's query.
func searchParams(q url.Values, now time.Time) (engine.Search, error) {
	s := engine.Search{ID: q.Get("id"), Tag: q.Get("tag"), ErrorCode: q.Get("error_code"), Error: q.Get("error"),
		Payload: q["payload"]}
	for _, p := range []struct {
		name string
		to   *time.Time
	}{{"finished_after", &s.FinishedAfter}, {"finished_before", &s.FinishedBefore}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return s, &commands.InputError{Field: p.name, Value: v, Reason: "want an RFC 3339 time (2026-11-26T10:00:00Z)"}
			}
			*p.to = t
		}
	}
	if v := q.Get("q"); v != "" {
		if err := parseQuery(v, &s); err != nil {
			return s, err
		}
	}
	if v := q.Get("since"); v != "" {
		d, err := parseSince(v)
		if err != nil {
			return s, err
		}
		if s.FinishedAfter.IsZero() || now.Add(-d).After(s.FinishedAfter) {
			s.FinishedAfter = now.Add(-d)
		}
	}
	return s, nil
}

// parseSince reads a span back from now: a Go duration (90m, 1h), or
// days (1d, 7d).
func parseSince(v string) (time.Duration, error) {
	bad := &commands.InputError{Field: "since", Value: v, Reason: "want a span such as 15m, 1h, 1d or 7d"}
	var d time.Duration
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 3650 {
			return 0, bad
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, bad
		}
	}
	if d <= 0 {
		return 0, bad
	}
	return d, nil
}

// searchSummary is the search's verdict on a summary. A summary keeps
// 500 bytes of an error's message: a longer one is left to the record.
func searchSummary(f *engine.Filter, s *summary) bool {
	if f.Search.Empty() {
		return true
	}
	sr := f.Search
	var code, msg string
	if s.Error != nil {
		code, msg = s.Error.Code, s.Error.Message
		if sr.Error != "" && strings.HasSuffix(msg, "…") && !engine.ContainsFold(code+" "+msg, sr.Error) {
			sr.Error = ""
		}
	}
	var finished time.Time
	if s.FinishedAt != nil {
		finished = *s.FinishedAt
	}
	return sr.MatchSummary(s.ID, s.Tags, code, msg, finished)
}

// searchPage is a page of a search that needs the records (the payload):
// the index's candidates are read searchChunk at a time and kept if their
// records match, until the page is full, the candidates end, or
// searchBudget records were read (the page then ends short, with a cursor
// after the last record read).
func (g *Gateway) searchPage(ctx context.Context, f engine.Filter, cur *Cursor, limit int) (*jobList, error) {
	out := &jobList{Jobs: []*projections.JobView{}}
	for {
		sums, next := g.index.List(f, cur, min(searchChunk, searchBudget-out.Scanned))
		jobs, err := g.records(ctx, sums)
		if err != nil {
			return nil, err
		}
		for i, j := range jobs {
			if f.Match(j) {
				out.Jobs = append(out.Jobs, projections.View(j))
			}
			if len(out.Jobs) == limit {
				out.Scanned += i + 1
				if i < len(jobs)-1 || next != nil {
					out.NextCursor = Cursor{CreatedAt: j.CreatedAt, ID: j.ID}.Encode()
				}
				return out, nil
			}
		}
		out.Scanned += len(sums)
		if next == nil {
			return out, nil
		}
		cur = next
		if out.Scanned >= searchBudget {
			out.NextCursor = next.Encode()
			return out, nil
		}
	}
}

// parseQuery reads the dashboard's search box into s: tag:T, code:C,
// id:PREFIX, error:WORD, path=value (a payload field), an id's beginning
// (six or more of 0-9A-Z), and other words: text of the last error.
func parseQuery(v string, s *engine.Search) error {
	if len(v) > engine.MaxSearchText {
		return &commands.InputError{Field: "q", Reason: fmt.Sprintf("at most %d bytes", engine.MaxSearchText)}
	}
	var words []string
	for _, tok := range strings.Fields(v) {
		key, val, hasColon := strings.Cut(tok, ":")
		switch {
		case hasColon && key == "tag":
			s.Tag = val
		case hasColon && (key == "code" || key == "error_code"):
			s.ErrorCode = val
		case hasColon && key == "id":
			s.ID = val
		case hasColon && key == "error":
			words = append(words, val)
		case strings.Contains(tok, "="):
			s.Payload = append(s.Payload, tok)
		case isIDPrefix(tok):
			s.ID = tok
		default:
			words = append(words, tok)
		}
	}
	if len(words) > 0 {
		s.Error = strings.TrimSpace(s.Error + " " + strings.Join(words, " "))
	}
	return nil
}

// isIDPrefix reports whether tok looks like the beginning of a job id.
func isIDPrefix(tok string) bool {
	if len(tok) < 6 || len(tok) > 26 {
		return false
	}
	for _, c := range tok {
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// searchSummaries is searchPage for the dashboard's rows (summaries).
func (g *Gateway) searchSummaries(ctx context.Context, f engine.Filter, cur *Cursor, limit int) ([]*summary, string, error) {
	list, err := g.searchPage(ctx, f, cur, limit)
	if err != nil {
		return nil, "", err
	}
	out := make([]*summary, 0, len(list.Jobs))
	for _, v := range list.Jobs {
		if s := g.index.Get(v.ID); s != nil {
			out = append(out, s)
		}
	}
	return out, list.NextCursor, nil
}
