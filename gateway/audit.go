package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// The audit of the event log (docs/audit.md), with the access rules of
// the NATS verbs audit_verify and audit_pubkey (read, then
// commands.Principal.AuditNamespace): a namespaced token verifies and
// exports its own namespace's part of the log; the whole log, or any
// namespace's part, needs an admin token of every namespace. The list of
// the jobs at an instant (GET /jobs?at=T) is here too: like verify and
// export, it reads the log, not the records.

// maxLogReads bounds the reads of the event log one gateway runs at once
// (a verify, an export, a list at an instant): more are 503 overloaded.
const maxLogReads = 2

// readLog takes one of the gateway's MaxLogReads slots, or refuses the
// request with an overloaded problem; release gives it back.
func (g *Gateway) readLog(w http.ResponseWriter) (release func(), err error) {
	select {
	case g.logReads <- struct{}{}:
		return func() { <-g.logReads }, nil
	default:
		w.Header().Set("Retry-After", "1")
		return nil, newProblem(problemOverloaded, http.StatusServiceUnavailable, fmt.Sprintf(
			"the gateway runs its maximum of %d reads of the event log (verify, export, list at an instant); retry once one has ended", maxLogReads))
	}
}

// onlyParams reads a query that may give only the parameters allowed,
// each at most once: another parameter, or one given twice, is
// invalid-input naming it.
func onlyParams(r *http.Request, allowed ...string) (map[string]string, error) {
	q, err := strictQuery(r)
	if err != nil {
		return nil, err
	}
	return checkParams(q, "is not a parameter of this route (it takes "+strings.Join(allowed, ", ")+")", allowed...)
}

// checkParams is onlyParams on a query read: why says what is wrong with
// a parameter that is not allowed.
func checkParams(q url.Values, why string, allowed ...string) (map[string]string, error) {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make(map[string]string, len(q))
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return nil, &commands.InputError{Field: k, Reason: why}
		}
		if len(q[k]) != 1 {
			return nil, &commands.InputError{Field: k, Reason: "give it once"}
		}
		out[k] = q[k][0]
	}
	return out, nil
}

// auditFields reads the verification a query of GET /audit/verify asks
// for.
func auditFields(q map[string]string) engine.AuditFields {
	return engine.AuditFields{Job: q["job"], Namespace: q["namespace"], Queue: q["queue"], Type: q["type"],
		Since: q["since"], Until: q["until"], Pubkey: q["pubkey"]}
}

// GET /audit/verify: the report of audit_verify (jetflow audit verify) on
// the scope of the query.
func (g *Gateway) auditVerify(w http.ResponseWriter, r *http.Request) {
	q, err := onlyParams(r, "job", "namespace", "queue", "type", "since", "until", "pubkey")
	if err != nil {
		fail(w, r, err, "")
		return
	}
	req, err := auditFields(q).Request()
	if err != nil {
		fail(w, r, err, "")
		return
	}
	if err := req.Authorize(r.Context(), g.store.JS, principal(r)); err != nil {
		fail(w, r, err, req.Scope.Job)
		return
	}
	release, err := g.readLog(w)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	defer release()
	rep, err := req.Verify(r.Context(), g.store.JS)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// exportScope reads the export a query of GET /audit/export asks for.
func exportScope(q map[string]string) (engine.AuditExportScope, error) {
	return engine.AuditExportFields{Since: q["since"], Until: q["until"], Namespace: q["namespace"]}.Scope()
}

// GET /audit/export: the export of jetflow export, streamed as JSON Lines.
// An error once lines are sent cuts the answer short (the connection is
// closed without the chunked body's end), which a client sees as an
// unexpected end, never as a complete export.
func (g *Gateway) auditExport(w http.ResponseWriter, r *http.Request) {
	q, err := onlyParams(r, "since", "until", "namespace")
	if err != nil {
		fail(w, r, err, "")
		return
	}
	sc, err := exportScope(q)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	if sc.Namespace, err = principal(r).AuditNamespace(sc.Namespace); err != nil {
		fail(w, r, err, "")
		return
	}
	release, err := g.readLog(w)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	defer release()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	if st, err := engine.AuditExport(r.Context(), g.store.JS, sc, w); err != nil {
		if st.Bytes == 0 { // nothing sent yet: still a problem
			fail(w, r, err, "")
			return
		}
		g.log.Warn("audit export cut short", "err", err, "bytes", st.Bytes)
		panic(http.ErrAbortHandler)
	}
}

// GET /audit/pubkey: the key the engine this gateway runs with signs the
// checkpoints with (Config.AuditPublicKey), else the key the newest
// checkpoint names.
func (g *Gateway) auditPubkey(w http.ResponseWriter, r *http.Request) {
	key, err := engine.AuditKeyOf(r.Context(), g.store.JS, g.cfg.AuditPublicKey)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, key)
}

// atParams are the parameters of GET /jobs with at: the filter of list_at.
var atParams = []string{"at", "namespace", "queue", "type", "state", "limit"}

// jobsAt is the answer of GET /jobs?at=T.
type jobsAt struct {
	Jobs []*projections.JobView `json:"jobs"`
	More bool                   `json:"more"`
}

// atQuery reads the instant and the filter of GET /jobs?at=T.
func atQuery(query url.Values) (time.Time, engine.AtFilter, error) {
	var f engine.AtFilter
	q, err := checkParams(query, "not with at (the jobs at an instant are folded from the log by namespace, queue, type and state; the others search the live records)", atParams...)
	if err != nil {
		return time.Time{}, f, err
	}
	at, err := parseAt(query["at"])
	if err != nil {
		return at, f, err
	}
	f = engine.AtFilter{Namespace: q["namespace"], Queue: q["queue"], Type: q["type"], State: domain.State(q["state"])}
	if s, ok := q["limit"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > engine.MaxListAt {
			return at, f, &commands.InputError{Field: "limit", Value: s, Reason: fmt.Sprintf("want 1-%d", engine.MaxListAt)}
		}
		f.Limit = n
	}
	return at, f, f.Validate()
}

// GET /jobs?at=T: the jobs in a state at instant T (list_at, jetflow ls
// --at), folded from the log, the most recently moved first; a namespaced
// token's are its namespace's (act).
func (g *Gateway) listJobsAt(w http.ResponseWriter, r *http.Request, query url.Values) {
	at, f, err := atQuery(query)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	release, err := g.readLog(w)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	defer release()
	jobs, more, err := engine.JobsAt(r.Context(), g.store.JS, at, f)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	out := &jobsAt{Jobs: make([]*projections.JobView, len(jobs)), More: more}
	for i, j := range jobs {
		out.Jobs[i] = projections.View(j)
	}
	writeJSON(w, http.StatusOK, out)
}
