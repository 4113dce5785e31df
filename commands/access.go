package commands

import (
	"fmt"
	"regexp"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// The rules of who sees and does what beyond a role's actions, shared by
// the HTTP API (gateway) and the NATS command protocol (cmdservice): each
// is decided here, once. A nil principal is access control off: it sees
// and may do everything.

// verbActionsMore are the verbs of the command protocol beyond the first
// ones (verbActions): each answers as its HTTP route does (docs/protocol.md).
var verbActionsMore = map[string]Action{
	"children":      ActRead,         // GET /jobs/{id}/children
	"retry":         ActRetry,        // POST /jobs/{id}/retry
	"reprioritize":  ActSubmit,       // POST /jobs/{id}/priority
	"queues":        ActRead,         // GET /queues
	"queue.pause":   ActAdmin,        // POST /queues/{queue}/pause
	"queue.resume":  ActAdmin,        // POST /queues/{queue}/resume
	"queue.limits":  ActAdmin,        // PUT /queues/{queue}, of every namespace
	"workers":       ActRead,         // GET /workers
	"verify":        ActAdmin,        // replay --verify: every namespace's jobs
	"replay":        ActAdmin,        // replay: every namespace's jobs
	"purge":         ActAdmin,        // purge --older-than: every namespace's jobs
	"purge_job":     ActAdmin,        // POST /jobs/{id}/purge
	"type.register": ActRegisterType, // PUT /types/{scope}/{category}/{name}
	"type.get":      ActRead,         // GET /types/{scope}/{category}/{name}
	"types":         ActRead,         // GET /types
	"namespace.set": ActAdmin,        // PUT /namespaces/{ns}
	"token.create":  ActAdmin,        // POST /tokens
	"tokens":        ActAdmin,        // GET /tokens
	"token.revoke":  ActAdmin,        // DELETE /tokens/{id}
	"file.put":      ActSubmit,       // a chunk of a submit's input file (POST /jobs, multipart)
	"file.submit":   ActSubmit,       // the submit of those files (POST /jobs, multipart)
	"file.input":    ActWork,         // GET /jobs/{id}/inputs/{name...}
	"file.result":   ActWork,         // PUT /jobs/{id}/result
	"file.download": ActRead,         // GET /jobs/{id}/download
	"tail":          ActRead,         // jetflow tail: the events of a namespace as they are appended
	"audit_verify":  ActRead,         // GET /audit/verify; more in AuditNamespace
	"audit_export":  ActRead,         // GET /audit/export; more in AuditNamespace
	"audit_pubkey":  ActRead,         // GET /audit/pubkey
}

func init() {
	for verb, act := range verbActionsMore {
		verbActions[verb] = act
	}
}

// InEveryNamespace refuses a principal held to one namespace (403) what
// every namespace shares, whatever its role: a queue's limits, /metrics,
// a rebuild or a purge of every namespace's jobs.
func (p *Principal) InEveryNamespace(act Action) error {
	if p.Scoped() {
		return &forbiddenError{Role: p.Role, Action: act, Namespace: AllNamespaces}
	}
	return nil
}

// AuditNamespace is the namespace whose part of the event log the
// principal verifies or exports ("": every namespace's, the whole log): a
// namespaced principal's own, whatever it asks (naming another is 403, as
// Scope); a principal of every namespace needs the admin role, whatever it
// asks, since the whole log, and the part of any namespace, is not its own.
func (p *Principal) AuditNamespace(asked string) (string, error) {
	if p == nil {
		return asked, nil
	}
	if p.Scoped() {
		return p.Scope(ActRead, asked)
	}
	if err := p.Can(ActAdmin); err != nil {
		return "", err
	}
	return asked, nil
}

// SeesQueue reports whether the principal is shown a queue when it lists
// them: a namespaced one sees the queues its namespace has jobs on (jobs
// counts them) and the default queue, every count of it its namespace's
// (ScopedQueue), without the admitter's slots, which name every
// namespace's users.
func (p *Principal) SeesQueue(queue string, jobs int) bool {
	return !p.Scoped() || jobs > 0 || queue == domain.DefaultQueue
}

// SeesWorker reports whether the principal may see a registered worker:
// one of its namespace (another's is not found).
func (p *Principal) SeesWorker(rec *domain.WorkerRecord) bool {
	return p == nil || p.Sees(rec.Namespace)
}

// OwnsWorker reports whether the principal may act for an HTTP worker
// (report, beat, claim, read its job's inputs, store its result): the
// worker's own token, or an admin's. Another is answered as a worker that
// does not exist.
func (p *Principal) OwnsWorker(rec *domain.WorkerRecord) bool {
	return p == nil || p.Role == RoleAdmin || rec.TokenID == p.TokenID
}

// SeesType reports whether the principal may see a type of scope: its
// namespace's and @global ones (another namespace's is an unknown type).
func (p *Principal) SeesType(scope string) bool {
	return p == nil || scope == ScopeGlobal || p.Sees(scope)
}

// MayRegisterType refuses a type registration the principal may not make:
// a type of another namespace (403), or an @global one by anyone but an
// admin (403), except a worker's registration (serving) naming an active
// @global type as it is (sameActive reports whether the type is active with
// the schema given, or none given; asked only then).
func (p *Principal) MayRegisterType(n TypeName, serving bool, sameActive func() bool) error {
	if p == nil || p.Role == RoleAdmin {
		return nil
	}
	if n.Scope != ScopeGlobal {
		if !p.Sees(n.Scope) {
			return &forbiddenError{Role: p.Role, Action: ActRegisterType, Namespace: n.Scope}
		}
		return nil
	}
	if serving && sameActive() {
		return nil
	}
	return &forbiddenError{Role: p.Role, Action: ActAdmin}
}

// httpWorkerID is the shape of an HTTP worker's id.
var httpWorkerID = regexp.MustCompile(`^wk-[0-9A-Z]{26}$`)

// IsHTTPWorkerID reports whether id can be an HTTP worker's ("wk-" and a
// job-style id): the workers a token registers, and acts for.
func IsHTTPWorkerID(id string) bool { return httpWorkerID.MatchString(id) }

// ParseTokenSpec reads a token's spec from its fields as given (POST
// /tokens, token.create), refusing any out of range: ttl is a Go duration
// ("720h"), "" for a token that never expires.
func ParseTokenSpec(name, ns, role, ttl string) (TokenSpec, error) {
	spec := TokenSpec{Name: name, Namespace: ns, Role: Role(role)}
	if ttl != "" {
		d, err := time.ParseDuration(ttl)
		if err != nil {
			return spec, &InputError{Field: "ttl", Value: fmt.Sprintf("%q", ttl), Reason: "want a duration such as 720h"}
		}
		if d <= 0 {
			return spec, &InputError{Field: "ttl", Value: ttl, Reason: "want more than 0 (leave it out for a token that never expires)"}
		}
		spec.TTL = d
	}
	return spec, spec.Check()
}

// QueueLimitsChange is a change of a queue's limits (PUT /queues/{queue},
// queue.limits): a limit left out (nil) keeps its value, 0 removes it.
type QueueLimitsChange struct {
	MaxRunning        *int      `json:"max_running,omitempty" msgpack:"max_running,omitempty"`
	MaxRunningPerUser *int      `json:"max_running_per_user,omitempty" msgpack:"max_running_per_user,omitempty"`
	MaxRunningPerKey  *int      `json:"max_running_per_key,omitempty" msgpack:"max_running_per_key,omitempty"`
	RateLimit         *int      `json:"rate_limit,omitempty" msgpack:"rate_limit,omitempty"`
	RatePeriod        *Duration `json:"rate_period,omitempty" msgpack:"rate_period,omitempty"`
	RateKey           *string   `json:"rate_key,omitempty" msgpack:"rate_key,omitempty"`
	Priorities        *bool     `json:"priorities,omitempty" msgpack:"priorities,omitempty"`
	MaxQueued         *int      `json:"max_queued,omitempty" msgpack:"max_queued,omitempty"`
}

// Check refuses each limit the change gives out of range (CheckLimits:
// counts 0 to MaxLimit, a rate period and a rate key); that a rate limit
// has its period is checked on the queue's limits with the change.
func (q *QueueLimitsChange) Check() error {
	counts := q.Apply(domain.QueueLimits{})
	counts.RatePeriod, counts.RateKey = 0, ""
	if counts.RateLimit > 0 {
		counts.RatePeriod = minRatePeriod // its own is checked below, and with the queue's as changed
	}
	if err := CheckLimits(counts); err != nil {
		return err
	}
	if q.RatePeriod != nil && *q.RatePeriod != 0 {
		if err := checkRatePeriod(time.Duration(*q.RatePeriod)); err != nil {
			return err
		}
	}
	if q.RateKey != nil {
		if err := checkRateKey(*q.RateKey); err != nil {
			return err
		}
	}
	return nil
}

// Apply returns cur with the limits the change gives. A rate limit of 0
// removes the period and the key too, unless the change gives them.
func (q *QueueLimitsChange) Apply(cur domain.QueueLimits) domain.QueueLimits {
	if q.MaxRunning != nil {
		cur.MaxRunning = *q.MaxRunning
	}
	if q.MaxRunningPerUser != nil {
		cur.MaxRunningPerUser = *q.MaxRunningPerUser
	}
	if q.MaxRunningPerKey != nil {
		cur.MaxRunningPerKey = *q.MaxRunningPerKey
	}
	if q.RateLimit != nil {
		cur.RateLimit = *q.RateLimit
		if cur.RateLimit == 0 {
			cur.RatePeriod, cur.RateKey = 0, ""
		}
	}
	if q.RatePeriod != nil {
		cur.RatePeriod = time.Duration(*q.RatePeriod)
	}
	if q.RateKey != nil {
		cur.RateKey = *q.RateKey
	}
	if q.Priorities != nil {
		cur.Priorities = *q.Priorities
	}
	if q.MaxQueued != nil {
		cur.MaxQueued = *q.MaxQueued
	}
	return cur
}
