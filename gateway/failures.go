package gateway

import (
	"net/http"
	"net/url"
	"sort"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// The failures page: failed jobs first, with their error's code and
// message, filtered by code, type, queue, namespace, time and the search
// box, with bulk actions on everything the filter selects.

type failuresPage struct {
	Namespace, Queue, Type, Code, Since, Q string
	Cursor, Next                           string
	Queues, Types, Codes                   []string
	Spans                                  []string
	Jobs                                   []*projections.JobView
	Total                                  int    // failed jobs the filter selects (-1: a payload search, not counted)
	Query                                  string // the filter, as GET /jobs's query (for bulk actions)
	Error                                  string
}

// maxCodes bounds the error codes the page offers to filter by.
const maxCodes = 50

// GET /failures
func (g *Gateway) pageFailures(w http.ResponseWriter, r *http.Request) {
	q, err := strictQuery(r)
	if q == nil {
		q = url.Values{}
	}
	d := &failuresPage{Namespace: q.Get("namespace"), Queue: q.Get("queue"), Type: q.Get("type"), Code: q.Get("error_code"),
		Since: q.Get("since"), Q: q.Get("q"), Cursor: q.Get("cursor"), Spans: []string{"1h", "1d", "7d"}}
	sel := url.Values{"state": {"failed"}}
	for _, k := range []string{"namespace", "queue", "type", "error_code", "since", "q"} {
		if v := q.Get(k); v != "" {
			sel.Set(k, v)
		}
	}
	d.Query = sel.Encode()
	status := http.StatusOK
	all := url.Values{}
	for k, v := range sel {
		all[k] = v
	}
	if d.Cursor != "" {
		all.Set("cursor", d.Cursor)
	}
	f, cur, _, lerr := listParams(all)
	if err == nil {
		err = lerr
	}
	if err == nil {
		err = g.index.waitSynced(r.Context())
	}
	if err == nil {
		var list *jobList
		if list, err = g.list(r.Context(), f, cur, defaultPageSize); err == nil {
			d.Jobs, d.Next = list.Jobs, list.NextCursor
		}
	}
	if err != nil {
		d.Error, status = problemOf(err).Detail, problemOf(err).Status
	}
	d.Total = -1
	if err == nil && !f.NeedsRecord() {
		f.State = domain.StateFailed
		d.Total = g.index.Count(f)
	}
	d.Queues, d.Types = g.index.Names(d.Namespace)
	d.Codes = g.index.failureCodes(d.Namespace)
	g.render(w, r, status, "failures", "Failures", d)
}

// Count is how many jobs match f (decided on the summaries).
func (x *index) Count(f engine.Filter) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := 0
	for _, s := range x.order {
		if matches(&f, s) {
			n++
		}
	}
	return n
}

// failureCodes are the error codes of the failed jobs of namespace ns
// ("": every one), the most common first, at most maxCodes.
func (x *index) failureCodes(ns string) []string {
	x.mu.RLock()
	counts := map[string]int{}
	for _, s := range x.order {
		if commands.EndedFailed(s.State) && s.Error != nil && s.Error.Code != "" && (ns == "" || s.Namespace == ns) {
			counts[s.Error.Code]++
		}
	}
	x.mu.RUnlock()
	codes := make([]string, 0, len(counts))
	for c := range counts {
		codes = append(codes, c)
	}
	sort.Slice(codes, func(i, k int) bool {
		if counts[codes[i]] != counts[codes[k]] {
			return counts[codes[i]] > counts[codes[k]]
		}
		return codes[i] < codes[k]
	})
	if len(codes) > maxCodes {
		codes = codes[:maxCodes]
	}
	return codes
}
