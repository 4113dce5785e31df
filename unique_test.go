package jetflow_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
)

// Both clients submit unique jobs alike: the first submit of a key
// creates, the others (from either client) get that job with created
// false; a cancelled job releases a key held while active; a bad option
// is refused before anything is sent, naming its field.
func TestClientsUniqueJobs(t *testing.T) {
	e := newBothEnv(t)
	for _, c := range []struct {
		who       string
		cl, other *jetflow.Client
	}{{"direct", e.d, e.k}, {"token", e.k, e.d}} {
		key := "sdk-" + c.who
		req, err := jetflow.NewRequest("both.none", map[string]int{"n": 1}, jetflow.UniqueKey(key), jetflow.UniqueFor(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		first, created, err := c.cl.Send(e.ctx, req)
		if err != nil || !created || first.Unique == nil || first.Unique.Key != key || first.Unique.While != jetflow.UniqueActive {
			t.Fatalf("%s: first %+v created %v: %v", c.who, first, created, err)
		}
		for _, cl := range []*jetflow.Client{c.cl, c.other} {
			again, created, err := cl.Send(e.ctx, req)
			if err != nil || created || again.ID != first.ID {
				t.Fatalf("%s: again %+v created %v: %v", c.who, again, created, err)
			}
		}
		if _, err := c.cl.Cancel(e.ctx, first.ID, "test"); err != nil {
			t.Fatal(err)
		}
		next, created, err := c.cl.Send(e.ctx, req)
		if err != nil || !created || next.ID == first.ID {
			t.Fatalf("%s: after cancel %+v created %v: %v", c.who, next, created, err)
		}
		byFields, err := c.cl.Submit(e.ctx, "both.echo", map[string]any{"to": "ada", "n": 2},
			jetflow.UniqueFields("to"), jetflow.UniqueWhile(jetflow.UniqueAny))
		if err != nil || byFields.Unique == nil || len(byFields.Unique.Fields) != 1 || byFields.Unique.While != jetflow.UniqueAny {
			t.Fatalf("%s: by fields %+v: %v", c.who, byFields, err)
		}
	}
	_, err := e.k.Submit(e.ctx, "both.none", nil, jetflow.UniqueKey("k"), jetflow.UniqueWhile("sometimes"))
	var in *jetflow.InputError
	if !errors.As(err, &in) || in.Field != "unique_while" {
		t.Fatalf("bad scope: %v", err)
	}
}
