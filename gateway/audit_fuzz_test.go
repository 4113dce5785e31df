package gateway

import (
	"net/http"
	"net/url"
	"testing"
)

// FuzzAuditQuery: the queries of GET /audit/verify, /audit/export and
// /jobs?at=T are read, or refused with a client's error (400), never a
// panic; what is read is within range.
func FuzzAuditQuery(f *testing.F) {
	for _, s := range []string{"namespace=acme&since=2026-11-26T14:02:00Z", "job=01ARZ3NDEKTSV4RRFFQ69G5FAV&until=2026-11-26T14:02:00.5%2B02:00",
		"type=a.b%3Ac&queue=q", "since=monday", "queue=a+b", "pubkey=NBZ4,x", "job=a&job=b", "%zz=1", "settle=1s",
		"since=2021-01-01T00:00:00Z&until=2020-01-01T00:00:00Z", "namespace=a:b", "at=2026-11-26T14:02:00Z&state=queued&limit=5",
		"at=x&limit=-1", "at=2026-11-26T14:02:00Z&cursor=c", "at=2026-11-26T14:02:00Z&limit=1001", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/", RawQuery: query}}
		if q, err := onlyParams(r, "job", "namespace", "queue", "type", "since", "until", "pubkey"); err != nil {
			checkDecodeError(t, err)
		} else {
			req, err := auditFields(q).Request()
			checkDecodeError(t, err)
			if err == nil && !req.Since.IsZero() && !req.Until.IsZero() && req.Until.Before(req.Since) {
				t.Fatalf("%q: until before since accepted", query)
			}
		}
		if q, err := onlyParams(r, "since", "until", "namespace"); err != nil {
			checkDecodeError(t, err)
		} else {
			sc, err := exportScope(q)
			checkDecodeError(t, err)
			if err == nil && !sc.Since.IsZero() && !sc.Until.IsZero() && sc.Until.Before(sc.Since) {
				t.Fatalf("%q: until before since accepted", query)
			}
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return
		}
		_, flt, err := atQuery(q)
		checkDecodeError(t, err)
		if err == nil && (flt.Limit < 0 || flt.Limit > 1000) {
			t.Fatalf("%q: limit %d accepted", query, flt.Limit)
		}
	})
}
