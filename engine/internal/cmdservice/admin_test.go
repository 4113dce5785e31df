package cmdservice

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/engine/internal/store"
)

// Every verb of admin.go and files.go has an action a role allows or not
// (commands.VerbAction: a verb without one would be let through by any
// token), and an endpoint.
func TestEveryVerbHasAnAction(t *testing.T) {
	for verb := range moreVerbs {
		if commands.VerbAction(verb) == "" {
			t.Errorf("verb %s has no action", verb)
		}
	}
	seen := map[string]bool{}
	for _, v := range commandVerbs {
		if seen[v] {
			t.Errorf("verb %s twice", v)
		}
		seen[v] = true
		if commands.VerbAction(v) == "" {
			t.Errorf("endpoint %s has no action", v)
		}
	}
	// The verbs of server.go: submit, get, cancel, list, events, wait,
	// history, the three workflow verbs and the schedule verbs.
	if want := len(moreVerbs) + 10 + len(scheduleVerbs); len(seen) != want {
		t.Errorf("%d endpoints for %d verbs", len(seen), want)
	}
}

// moreBodies are a value of each command body of admin.go and files.go.
func moreBodies() []any {
	return []any{&childrenCommand{}, &retryCommand{}, &reprioritizeCommand{}, &queueCommand{}, &queueLimitsCommand{}, &verifyCommand{},
		&purgeCommand{}, &typeCommand{}, &typesCommand{}, &namespaceCommand{}, &tokenCommand{}, &filePutCommand{},
		&fileSubmitCommand{}, &fileResultCommand{}, &fileInputCommand{}, &fileDownloadCommand{}, &emptyCommand{}, &AuditFields{}}
}

// decodeMore decodes body as the command server does the body of the
// which-th of moreBodies (a file.submit's job too): the command, or its
// problem.
func decodeMore(which int, body []byte, asJSON bool) (any, error) {
	bodies := moreBodies()
	v := bodies[which%len(bodies)]
	if err := decodeCommand(body, asJSON, v); err != nil {
		return nil, undecodable("verb", body, asJSON, v, err)
	}
	if fs, ok := v.(*fileSubmitCommand); ok && len(fs.Job) > 0 {
		var req commands.SubmitRequest
		if err := decodeCommand(fs.Job, asJSON, &req); err != nil {
			return nil, undecodable("file.submit", fs.Job, asJSON, &req, err)
		}
		if err := commands.CheckGivenNamespace(fs.Job, asJSON); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// FuzzMoreCommandBodies: the bodies of the verbs of admin.go and files.go,
// JSON or msgpack, decode or are refused with a client's problem (400).
func FuzzMoreCommandBodies(f *testing.F) {
	seeds := []string{`{"id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","after":2,"limit":5}`, `{"queue":"q","max_running":3,"expect":{"max_running":1,"max_running_per_user":0}}`,
		`{"settle":"3s"}`, `{"older_than":"1h","namespace":"a","dry_run":true,"cursor":"AQ","limit":10}`,
		`{"type":"a:b:c","schema":{"type":"object"},"description":"d"}`, `{"namespace":"a","strict_types":true,"retention":"720h"}`,
		`{"name":"n","namespace":"*","role":"admin","ttl":"1h"}`, `{"upload":"up-AAAAAAAAAAAAAAAAAAAAAA","name":"a","offset":0,"data":"aGk="}`,
		`{"upload":"up-x","files":[{"name":"a","size":2,"digest":"SHA-256=x"}],"job":{"type":"t","namespace":""}}`,
		`{"id":"x","worker_id":"wk-1","offset":3,"data":"","last":true,"digest":"d"}`, `{"id":"x","name":"a","offset":1,"limit":2,"cursor":"c"}`,
		`{"job":"j","namespace":"n","queue":"q","type":"t","since":"2026-11-26T14:02:00Z","until":"x","pubkey":"K"}`, `{"retention":5}`, `{"id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","priority":-3}`, `{"job":[]}`, `[]`, ``, `{}`}
	for i, s := range seeds {
		f.Add([]byte(s), true, uint8(i))
		var v any
		if msgpackOf(s, &v) == nil {
			b, _ := msgpack.Marshal(v)
			f.Add(b, false, uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool, which uint8) {
		_, err := decodeMore(int(which), body, asJSON)
		var p *problems.Problem
		if err != nil && !errors.As(err, &p) && !errors.Is(err, commands.ErrInvalidInput) {
			t.Fatalf("%d %q: %v", which, body, err)
		}
		if p != nil && p.Status != 400 {
			t.Fatalf("%d %q: %+v", which, body, p)
		}
	})
}

// msgpackOf reads the JSON s into v, for a msgpack seed.
func msgpackOf(s string, v *any) error { return json.Unmarshal([]byte(s), v) }

// TestRebuildsBounded: with MaxRebuilds verify, replay, purge, audit_verify
// or audit_export commands running, another is overloaded (503) and takes
// no slot; a body it
// refuses is still refused first (400), and a slot given back is taken
// again.
func TestRebuildsBounded(t *testing.T) {
	c := &CommandServer{rebuilds: make(chan struct{}, MaxRebuilds), exports: make(chan struct{}, MaxExports), store: &store.Store{}}
	var releases []func()
	for range MaxRebuilds {
		_, release, r := c.rebuild(&call{ctx: t.Context()})
		if r != nil {
			t.Fatalf("slot refused: %+v", r.Error)
		}
		releases = append(releases, release)
	}
	// An export takes a slot of its own pool, not one of the rebuilds'.
	for range MaxExports {
		if _, _, r := takeSlot(&call{ctx: t.Context()}, c.exports, "exports"); r != nil {
			t.Fatalf("export slot refused: %+v", r.Error)
		}
	}
	for _, tc := range []struct {
		verb, body string
		slug       string
		status     int
	}{
		{"verify", `{"settle":"1s"}`, problems.Overloaded, 503},
		{"replay", `{}`, problems.Overloaded, 503},
		{"purge", `{"older_than":"1h"}`, problems.Overloaded, 503},
		{"verify", `{"settle":"2m"}`, problems.InvalidInput, 400},
		{"purge", `{}`, problems.InvalidInput, 400},
		{"replay", `{"x":1}`, problems.MalformedRequest, 400},
		{"audit_verify", `{"since":"monday"}`, problems.InvalidInput, 400},
		{"audit_verify", `{"pubkey":"nope"}`, problems.InvalidInput, 400},
		{"audit_verify", `{"settle":"1s"}`, problems.MalformedRequest, 400},
		{"audit_verify", `{}`, problems.Overloaded, 503},
		{"audit_verify", `{"namespace":"acme","since":"2026-01-01T00:00:00Z"}`, problems.Overloaded, 503},
		{"audit_export", `{}`, problems.Overloaded, 503},
		{"audit_export", `{"until":"monday"}`, problems.InvalidInput, 400},
		{"audit_export", `{"to":"x"}`, problems.MalformedRequest, 400},
	} {
		r := moreVerbs[tc.verb](c, &call{ctx: t.Context(), verb: tc.verb, asJSON: true, body: []byte(tc.body), reply: "_INBOX.test"})
		if r.Error == nil || r.Error.Type != tc.slug || r.Error.Status != tc.status {
			t.Errorf("%s %s: %+v, want %s %d", tc.verb, tc.body, r.Error, tc.slug, tc.status)
		}
		if len(c.rebuilds) != MaxRebuilds {
			t.Fatalf("%s %s: %d slots held", tc.verb, tc.body, len(c.rebuilds))
		}
	}
	releases[0]()
	if _, _, r := c.rebuild(&call{ctx: t.Context()}); r != nil || len(c.rebuilds) != MaxRebuilds {
		t.Fatalf("a slot given back was not taken again: %+v, %d held", r, len(c.rebuilds))
	}
}
