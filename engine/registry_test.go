package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

func typeName(t *testing.T, full string) commands.TypeName {
	t.Helper()
	n, err := commands.ParseTypeName(full)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// registerType registers a type with no schema.
func (h *harness) registerType(full string) {
	h.t.Helper()
	if _, _, err := h.st.Types.Register(h.ctx, commands.TypeDef{Name: typeName(h.t, full)}, "t"); err != nil {
		h.t.Fatal(err)
	}
}

// typeEvents is the registry's history of one type, from the log.
func (h *harness) typeEvents(n commands.TypeName) []string {
	h.t.Helper()
	var out []string
	_, err := streams.ReadSubject(h.ctx, h.st.NC, streams.EventsStream, streams.TypeSubject(n.Scope, n.Category, n.Name), 1,
		func(seq uint64, data []byte) error {
			ev, err := streams.DecodeEvent(data)
			if err != nil {
				return err
			}
			out = append(out, ev.Type)
			return nil
		})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// Registrations of one name with different schemas at the same moment, from
// several processes: exactly one wins, every other is told the schema
// conflicts; the log has one registration.
func TestRegistrationRace(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	n := typeName(t, "acme:img:thumb")
	const racers = 8
	var wg sync.WaitGroup
	results := make([]error, racers)
	created := make([]bool, racers)
	start := make(chan struct{})
	for i := range racers {
		st := testkit.Store(t, testkit.Conn(t, h.srv), fmt.Sprintf("r%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			schema := fmt.Appendf(nil, `{"type":"object","properties":{"v%d":{"type":"integer"}}}`, i)
			_, created[i], results[i] = st.Types.Register(h.ctx, commands.TypeDef{Name: n, Schema: schema}, "r")
		}()
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range results {
		switch {
		case err == nil && created[i]:
			won++
		case errors.Is(err, commands.ErrSchemaConflict) && engine.ProblemOf(err).Status == 409:
		default:
			t.Fatalf("racer %d: created %v, %v", i, created[i], err)
		}
	}
	if won != 1 {
		t.Fatalf("%d registrations won", won)
	}
	if evs := h.typeEvents(n); fmt.Sprint(evs) != "[type.registered]" {
		t.Fatalf("log of the type: %v", evs)
	}
	h.verify()
}

// A payload that breaks its type's schema is refused with every violation
// (a JSON pointer and a message) and writes nothing; a good one is
// submitted under the type's full name.
func TestSchemaViolationWritesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	schema := []byte(`{"type":"object","required":["width","src"],"properties":{"width":{"type":"integer","minimum":1},"src":{"type":"string"}}}`)
	if _, created, err := h.st.Types.Register(h.ctx, commands.TypeDef{Name: typeName(t, "acme:img:thumb"), Schema: schema}, "t"); err != nil || !created {
		t.Fatalf("register: %v %v", created, err)
	}
	// Registered again with the same schema (keys in another order): nothing changes.
	same := []byte(`{"properties":{"src":{"type":"string"},"width":{"minimum":1,"type":"integer"}},"required":["width","src"],"type":"object"}`)
	if _, created, err := h.st.Types.Register(h.ctx, commands.TypeDef{Name: typeName(t, "acme:img:thumb"), Schema: same}, "t"); err != nil || created {
		t.Fatalf("register the same schema again: %v %v", created, err)
	}
	before := h.lastSeq()
	_, err := h.st.Submit(h.ctx, &commands.SubmitRequest{Namespace: "acme", Type: "img:thumb", Payload: commands.RawJSON(`{"width":0}`)})
	var sv *commands.SchemaViolationError
	if !errors.As(err, &sv) || !errors.Is(err, commands.ErrSchemaViolation) || !errors.Is(err, commands.ErrInvalidInput) {
		t.Fatalf("bad payload: %v", err)
	}
	got := map[string]bool{}
	for _, v := range sv.Violations {
		got[v.Pointer] = true
	}
	if len(sv.Violations) != 2 || !got["/width"] || !got["/"] || sv.Type != "acme:img:thumb" {
		t.Fatalf("violations %+v", sv.Violations)
	}
	if p := engine.ProblemOf(err); p.Type != "schema-violation" || p.Status != 422 || len(p.Violations) != 2 {
		t.Fatalf("problem %+v", p)
	}
	if after := h.lastSeq(); after != before {
		t.Fatalf("a refused submit wrote events %d..%d", before+1, after)
	}
	ok := h.submit(commands.SubmitRequest{Namespace: "acme", Type: "img:thumb", Payload: commands.RawJSON(`{"width":64,"src":"a.png"}`)})
	if ok.Job.Spec.Type != "acme:img:thumb" || ok.Job.Spec.Namespace != "acme" {
		t.Fatalf("submitted %+v", ok.Job.Spec)
	}
	h.verify()
}

// category:name resolves in the job's namespace first, then @global; a
// name that resolves to nothing, another namespace's type, or a deleted
// type is unknown; a strict namespace takes no free-form type.
func TestResolveTypes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	reg := h.registerType
	submit := func(ns, typ string) (string, error) {
		res, err := h.st.Submit(h.ctx, &commands.SubmitRequest{Namespace: ns, Type: typ})
		if err != nil {
			return "", err
		}
		return res.Job.Spec.Type, nil
	}
	reg("@global:img:resize")
	reg("other:img:crop")
	for _, c := range []struct{ ns, typ, want string }{
		{"acme", "img:resize", "@global:img:resize"},
		{"acme", "@global:img:resize", "@global:img:resize"},
		{"acme", "img:crop", "unknown-type"},
		{"acme", "other:img:crop", "unknown-type"},
		{"other", "img:crop", "other:img:crop"},
		{"acme", "demo.echo", "demo.echo"},
		{"ac.me", "demo.echo", "invalid-namespace"},
	} {
		got, err := submit(c.ns, c.typ)
		if err != nil {
			got = engine.ProblemOf(err).Type
		}
		if got != c.want {
			t.Errorf("submit %s in %s: %s, want %s", c.typ, c.ns, got, c.want)
		}
	}
	reg("acme:img:resize") // the namespace's own comes first now
	if got, err := submit("acme", "img:resize"); err != nil || got != "acme:img:resize" {
		t.Fatalf("after the namespace's own: %s %v", got, err)
	}
	if _, err := h.st.Types.SetNamespace(h.ctx, "acme", domain.NamespaceSettings{StrictTypes: true}, "t"); err != nil {
		t.Fatal(err)
	}
	before := h.lastSeq()
	if _, err := submit("acme", "demo.echo"); engine.ProblemOf(err).Type != "unknown-type" {
		t.Fatalf("free-form type in a strict namespace: %v", err)
	}
	if h.lastSeq() != before {
		t.Fatal("a refused submit wrote an event")
	}
	if got, err := submit("acme", "img:resize"); err != nil || got != "acme:img:resize" {
		t.Fatalf("registered type in a strict namespace: %s %v", got, err)
	}
	h.verify()
}

// A type nobody serves and no job uses is soft-deleted after the grace;
// one a worker serves, or with a job not terminal, is not. Submits to a
// deleted type are refused; the next registration reactivates it, its
// history kept.
func TestTypeSoftDeleteAndReactivation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	reg := h.registerType
	reg("acme:idle:x")
	reg("acme:busy:x")
	reg("acme:served:x")
	reg("@internal:idle:x")
	queued := h.submit(commands.SubmitRequest{Namespace: "acme", Type: "busy:x"})
	if err := h.st.Workers.Put(h.ctx, &domain.WorkerRecord{ID: "w-1", Types: []string{"acme:served:x"}}); err != nil {
		t.Fatal(err)
	}
	sweeper := newTypeSweeper(testkit.Store(t, testkit.Conn(t, h.srv), "sweeper"), maintenance.TypeSweeperConfig{Grace: 500 * time.Millisecond, Interval: time.Hour, Log: testkit.Logger(t)})
	if n, err := sweeper.Sweep(h.ctx); err != nil || n != 0 {
		t.Fatalf("first sweep (the grace starts): %d %v", n, err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if _, err := sweeper.Sweep(h.ctx); err != nil {
			return err
		}
		if sweeper.Deleted() == 0 {
			return fmt.Errorf("nothing deleted yet")
		}
		return nil
	})
	if sweeper.Deleted() != 1 {
		t.Fatalf("%d types deleted", sweeper.Deleted())
	}
	for full, deleted := range map[string]bool{"acme:idle:x": true, "acme:busy:x": false, "acme:served:x": false, "@internal:idle:x": false} {
		rec, err := h.st.Types.Type(h.ctx, typeName(t, full))
		if err != nil || rec.Deleted != deleted {
			t.Fatalf("%s: %v deleted %v", full, err, rec != nil && rec.Deleted)
		}
	}
	// The submit path's registry follows the bucket through a watch: once
	// it has seen the delete, a submit of the type is refused.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if _, err := h.st.Types.Resolve(h.ctx, "acme", "idle:x", nil); err == nil || engine.ProblemOf(err).Type != "unknown-type" {
			return fmt.Errorf("the registry still resolves acme:idle:x: %v", err)
		}
		return nil
	})
	if _, err := h.st.Submit(h.ctx, &commands.SubmitRequest{Namespace: "acme", Type: "idle:x"}); err == nil || engine.ProblemOf(err).Type != "unknown-type" {
		t.Fatalf("submit to a deleted type: %v", err)
	}
	// The queued job keeps its type; once it is terminal the type goes too.
	if _, err := h.st.Cancel(h.ctx, queued.Job.ID, ""); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if _, err := sweeper.Sweep(h.ctx); err != nil {
			return err
		}
		if sweeper.Deleted() < 2 {
			return fmt.Errorf("busy type not deleted yet")
		}
		return nil
	})
	rec, created, err := h.st.Types.Register(h.ctx, commands.TypeDef{Name: typeName(t, "acme:idle:x"), Schema: []byte(`{"type":"object"}`)}, "t")
	if err != nil || created || rec.Deleted || string(rec.Schema) != `{"type":"object"}` {
		t.Fatalf("reactivate: %v %v %+v", created, err, rec)
	}
	if evs := h.typeEvents(typeName(t, "acme:idle:x")); fmt.Sprint(evs) != "[type.registered type.deleted type.registered]" {
		t.Fatalf("history of the type: %v", evs)
	}
	h.submit(commands.SubmitRequest{Namespace: "acme", Type: "idle:x", Payload: commands.RawJSON(`{}`)})
	h.verify()
}

// A record behind the log (its writer died between the event and the
// record) is rebuilt at the next read of it.
func TestTypeRecordRepairedFromTheLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	n := typeName(t, "acme:img:thumb")
	ev, err := commands.RegisterType(nil, commands.TypeDef{Name: n, Schema: []byte(`{"type":"object"}`)}, "t", time.Now().UTC(), commands.SchemaEqualBytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.TypeSubject(n.Scope, n.Category, n.Name), ev, 0).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	// No record was written: the type is known all the same.
	rec, err := h.st.Types.Type(context.Background(), n)
	if err != nil || rec.Deleted || string(rec.Schema) != `{"type":"object"}` {
		t.Fatalf("type %+v %v", rec, err)
	}
	h.verify()
}

// A scope holds at most MaxTypes types (deleted ones count); the limit of
// one scope leaves the others alone, and a type there may still be
// registered again.
func TestTypeLimitPerScope(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.st.Types.MaxTypes = 3
	for _, n := range []string{"acme:a:one", "acme:a:two", "acme:a:three"} {
		h.registerType(n)
	}
	if _, err := h.st.Types.Delete(h.ctx, typeName(t, "acme:a:three"), "gone", "t", nil); err != nil {
		t.Fatal(err)
	}
	before := h.lastSeq()
	_, _, err := h.st.Types.Register(h.ctx, commands.TypeDef{Name: typeName(t, "acme:a:four")}, "t")
	if !errors.Is(err, commands.ErrTypeLimit) || !errors.Is(err, commands.ErrConflict) || engine.ProblemOf(err).Status != 409 {
		t.Fatalf("fourth type: %v", err)
	}
	if err := h.st.Types.Check(h.ctx, commands.TypeDef{Name: typeName(t, "acme:a:four")}); !errors.Is(err, commands.ErrTypeLimit) {
		t.Fatalf("check of a fourth type: %v", err)
	}
	if after := h.lastSeq(); after != before {
		t.Fatalf("a refused registration wrote events %d..%d", before+1, after)
	}
	h.registerType("acme:a:one")   // registered already: no new type
	h.registerType("acme:a:three") // reactivated
	h.registerType("other:a:four") // another scope
}

// A writer that dies between its registry event and the record: the
// Projector brings the record up to the log, and every engine's cache with
// it, without anyone reading that name again.
func TestProjectorRepairsRegistryRecords(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	n := typeName(t, "acme:img:thumb")
	h.registerType(n.String())
	cur, err := h.st.Types.Type(h.ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	del, err := commands.DeleteType(cur, "crash after this", "t", now)
	if err != nil {
		t.Fatal(err)
	}
	set, err := commands.SetNamespace(nil, "acme", domain.NamespaceSettings{StrictTypes: true}, "t", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.TypeSubject(n.Scope, n.Category, n.Name), del, cur.Seq).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.NamespaceSubject("acme"), set, 0).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		types, err := h.st.Types.Types(h.ctx, "acme", false)
		if err != nil {
			return err
		}
		ns, err := h.st.Types.Namespace(h.ctx, "acme")
		if err != nil {
			return err
		}
		if len(types) != 0 || ns == nil || !ns.Settings.StrictTypes {
			return testkit.Errorf("%d active types, namespace %+v", len(types), ns)
		}
		return nil
	})
	_, err = h.st.Submit(h.ctx, &commands.SubmitRequest{Namespace: "acme", Type: "img:thumb"})
	if !errors.Is(err, commands.ErrUnknownType) {
		t.Fatalf("submit of the deleted type: %v", err)
	}
	h.verify()
}

// CanonicalSchema takes any bytes without a panic; what it accepts is
// canonical already (a second pass changes nothing) and refers to nothing
// outside itself.
func FuzzCanonicalSchema(f *testing.F) {
	for _, s := range []string{`{"type":"object","required":["a"]}`, `{"const":12345678901234567891}`, `{"$ref":"file:///etc/passwd"}`,
		`{"$defs":{"a":{"type":"string"}},"$ref":"#/$defs/a"}`, `true`, `{"type":"nope"}`, `[]`, `{} {}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := engine.CanonicalSchema(b)
		if err != nil {
			if !errors.Is(err, commands.ErrInvalidSchema) {
				t.Fatalf("error %v is not invalid-schema", err)
			}
			return
		}
		again, err := engine.CanonicalSchema(c)
		if err != nil || string(again) != string(c) {
			t.Fatalf("canonical %s: again %s, %v", c, again, err)
		}
	})
}
