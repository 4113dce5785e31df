package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/projections"
)

// GET /api/v1/jobs/{id}?at=T: the job as it was at instant T (RFC 3339),
// folded from its events the log stored at or before T (docs/audit.md).
// The access rules are GET's (jobAct): another namespace's job is not
// found; a bad instant is 400 invalid-input naming the field at.
func (g *Gateway) getJobAt(w http.ResponseWriter, r *http.Request, id string) {
	at, err := parseAt(r.URL.Query()["at"])
	if err != nil {
		fail(w, r, err, id)
		return
	}
	j, err := engine.JobAt(r.Context(), g.store.JS, id, at)
	// A job of another namespace is answered exactly as one with no event
	// by then: the same detail.
	if p := principal(r); errors.Is(err, commands.ErrNotFound) || err == nil && p != nil && !p.Sees(j.Spec.Namespace) {
		err = fmt.Errorf("job %s: %w", id, commands.ErrNotFound)
	}
	if err != nil {
		fail(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, projections.View(j))
}

// parseAt reads the one at of a query: an instant in RFC 3339.
func parseAt(vs []string) (time.Time, error) {
	bad := func(v, reason string) error {
		return &commands.InputError{Field: "at", Value: v, Reason: reason}
	}
	if len(vs) != 1 {
		return time.Time{}, bad("", "give one at")
	}
	t, err := time.Parse(time.RFC3339Nano, vs[0])
	if err != nil || t.Year() < 1970 || t.Year() > 9999 {
		return time.Time{}, bad(vs[0], "want an instant in RFC 3339 (2026-01-02T15:04:05Z)")
	}
	return t, nil
}
