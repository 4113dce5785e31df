package cmdservice

import (
	"errors"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/problems"
)

// decodeCommandBody decodes the body of a wait, history or list command
// as the command server does: the command, or its problem.
func decodeCommandBody(verb string, body []byte, asJSON bool) (any, error) {
	var v any
	switch verb {
	case "wait":
		v = &waitCommand{}
	case "history":
		v = &historyCommand{}
	default:
		v = &listCommand{}
	}
	if err := decodeCommand(body, asJSON, v); err != nil {
		return nil, undecodable(verb, body, asJSON, v, err)
	}
	return v, nil
}

// FuzzCommandBodies: the bodies of wait, history and list, JSON or
// msgpack, decode or are refused with a client's problem.
func FuzzCommandBodies(f *testing.F) {
	for _, s := range []string{`{"id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","timeout":"5s"}`, `{"id":"x","after":3,"limit":10}`,
		`{"state":"queued","limit":2,"cursor":"AQ"}`, `{"timeout":-1}`, `{"after":-1}`, `{"cursor":5}`, `[]`, ``} {
		f.Add([]byte(s), true, uint8(0))
		f.Add([]byte(s), false, uint8(1))
	}
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool, which uint8) {
		verb := []string{"wait", "history", "list"}[int(which)%3]
		_, err := decodeCommandBody(verb, body, asJSON)
		var p *problems.Problem
		if err != nil && !errors.As(err, &p) && !errors.Is(err, commands.ErrInvalidInput) {
			t.Fatalf("%s %q: %v", verb, body, err)
		}
		if p != nil && p.Status != 400 {
			t.Fatalf("%s %q: %+v", verb, body, p)
		}
	})
}

// FuzzScheduleBodies: the bodies of the schedule verbs, JSON or msgpack,
// decode or are refused with a client's problem, and a create that
// decodes is checked without a panic.
func FuzzScheduleBodies(f *testing.F) {
	for _, s := range []string{`{"name":"n","every":"1m","job":{"type":"a"}}`, `{"name":"n","namespace":"x"}`,
		`{"name":"n","cron":"0 3 * * *","timezone":"Asia/Tokyo","job":{"type":"a","payload":[1]},"jitter":5}`,
		`{"cron":5}`, `{"job":[]}`, `[]`, ``} {
		f.Add([]byte(s), true, uint8(0))
		f.Add([]byte(s), false, uint8(1))
	}
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool, which uint8) {
		var v any
		var check func() error
		switch which % 3 {
		case 0:
			req := &commands.ScheduleRequest{}
			v, check = req, func() error { _, _, err := req.Spec(time.Now()); return err }
		case 1:
			p := &commands.SchedulePatch{}
			v, check = p, func() error { return nil }
		default:
			v, check = &scheduleRef{}, func() error { return nil }
		}
		err := decodeCommand(body, asJSON, v)
		if err != nil {
			p := undecodable("schedule", body, asJSON, v, err)
			if p.Status != 400 {
				t.Fatalf("%q: %+v", body, p)
			}
			return
		}
		if err := check(); err != nil && !errors.Is(err, commands.ErrInvalidInput) {
			t.Fatalf("%q: %v", body, err)
		}
	})
}
