package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// ReadSeen and NotSeen answer another namespace's job as an unknown id:
// not found with the same text; when the reads fail, the same failure
// (an unknown id's read that fails is not "not found": a 5xx, not a 404),
// naming the id asked for; and a principal that sees every namespace, or
// none given (access control off), reads the job.
func TestReadSeenAnswersAsAnUnknownID(t *testing.T) {
	st := storetest.Open(t, testkit.Conn(t, testkit.Server(t)), "test")
	ctx := testkit.Ctx(t)
	res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "a.b", Namespace: "other", Payload: commands.RawJSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	other, unknown := res.Job.ID, domain.NewID()
	acme := &commands.Principal{Namespace: "acme"}

	_, errOther := st.ReadSeen(ctx, acme, other)
	_, errUnknown := st.ReadSeen(ctx, acme, unknown)
	errIndexed := st.NotSeen(ctx, other)
	for _, err := range []error{errOther, errUnknown, errIndexed} {
		if !errors.Is(err, commands.ErrNotFound) {
			t.Fatalf("not found: %v", err)
		}
	}
	if want := "job " + other + ": not found"; errOther.Error() != want || errIndexed.Error() != want {
		t.Fatalf("another namespace's job: %q, %q; want %q", errOther, errIndexed, want)
	}
	if want := "job " + unknown + ": not found"; errUnknown.Error() != want {
		t.Fatalf("unknown id: %q, want %q", errUnknown, want)
	}

	// The reads fail (ctx ended): the unknown id's failure, for either.
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, errUnknown = st.ReadSeen(done, acme, unknown)
	errIndexed = st.NotSeen(done, unknown)
	if !errors.Is(errUnknown, context.Canceled) || !errors.Is(errIndexed, context.Canceled) ||
		errors.Is(errIndexed, commands.ErrNotFound) || errIndexed.Error() != errUnknown.Error() {
		t.Fatalf("failed reads: NotSeen %q, an unknown id's %q", errIndexed, errUnknown)
	}

	for _, p := range []*commands.Principal{nil, {Namespace: commands.AllNamespaces}, {Namespace: "other"}} {
		if snap, err := st.ReadSeen(ctx, p, other); err != nil || snap.Job.ID != other {
			t.Fatalf("principal %+v: %v", p, err)
		}
	}
}
