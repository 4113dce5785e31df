package gateway

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"
)

// GET /jobs searches by id, tag, the last error's code and text, payload
// fields and when the job finished; a payload search pages by cursor,
// each page reading at most searchBudget records; bad values are refused,
// naming the parameter.
func TestSearchJobs(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := 0; i < 30; i++ {
		body := map[string]any{"type": "se.job", "payload": map[string]any{"customer": i % 3, "order": map[string]any{"id": i}}}
		if i%5 == 0 {
			body["tags"] = []string{"vip"}
		}
		ids = append(ids, e.submit(body).ID)
	}
	for _, id := range ids[:4] {
		e.do("POST", "/api/v1/jobs/"+id+"/cancel", `{"reason":"Customer asked"}`).want(t, 200)
	}
	list := func(q string) ([]string, *jobList) {
		t.Helper()
		var l jobList
		e.do("GET", "/api/v1/jobs?"+q, nil).want(t, 200).json(t, &l)
		var out []string
		for _, j := range l.Jobs {
			out = append(out, j.ID)
		}
		return out, &l
	}
	want := func(q string, idx ...int) {
		t.Helper()
		var w []string
		for i := len(idx) - 1; i >= 0; i-- { // newest first
			w = append(w, ids[idx[i]])
		}
		if got, _ := list(q); !slices.Equal(got, w) {
			t.Fatalf("%s: %v, want %v", q, got, w)
		}
	}
	want("tag=vip", 0, 5, 10, 15, 20, 25)
	want("error_code=CANCELLED", 0, 1, 2, 3)
	want("error=customer+ASKED&tag=vip", 0)
	want("payload=customer%3D1&payload=order.id%3D10", 10)
	want("payload=customer%3D2&state=queued", 5, 8, 11, 14, 17, 20, 23, 26, 29)
	want("id="+ids[7], 7)
	want("since=1h&state=cancelled", 0, 1, 2, 3)
	want("finished_before=" + url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339)))

	// Paging a payload search: 10 matches, pages of 4.
	var got []string
	q := "payload=customer%3D0&limit=4"
	for pages := 0; ; pages++ {
		page, l := list(q)
		got = append(got, page...)
		if l.NextCursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("too many pages")
		}
		q = "payload=customer%3D0&limit=4&cursor=" + l.NextCursor
	}
	if len(got) != 10 || got[0] != ids[27] || got[9] != ids[0] {
		t.Fatalf("pages %v", got)
	}
	// A budget smaller than the candidates: a short page with a cursor.
	searchBudget = 7
	t.Cleanup(func() { searchBudget = 10000 })
	page, l := list("payload=customer%3D0&limit=50")
	if l.Scanned != 7 || l.NextCursor == "" || len(page) != 2 || page[0] != ids[27] || page[1] != ids[24] {
		t.Fatalf("budget page: %d jobs, scanned %d, cursor %q", len(page), l.Scanned, l.NextCursor)
	}
	for _, c := range []struct{ q, field string }{
		{"payload=customer", "payload"}, {"since=yesterday", "since"}, {"finished_after=today", "finished_after"},
		{"payload=a%3D1&payload=b%3D1&payload=c%3D1&payload=d%3D1&payload=e%3D1", "payload"},
	} {
		if p := e.do("GET", "/api/v1/jobs?"+c.q, nil).problem(t, http.StatusBadRequest, "invalid-input"); p.Field != c.field {
			t.Fatalf("%s: field %q", c.q, p.Field)
		}
	}
}
