package store_test

import (
	"errors"
	"testing"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/testkit"
)

// BenchmarkReadSeen is a namespaced principal's read of another
// namespace's job and of an id that does not exist, the way the command
// service checks a job command (ReadSeen), and the gateway's answer to a
// job its index holds under another namespace (NotSeen): each is the same
// not-found, and should take about as long as the unknown id's.
//
//	go test -run '^$' -bench ReadSeen -benchtime 5000x ./engine/internal/store/
func BenchmarkReadSeen(b *testing.B) {
	st := storetest.Open(b, testkit.Conn(b, testkit.Server(b)), "bench")
	ctx := testkit.Ctx(b)
	p := &commands.Principal{Namespace: "acme"}
	notFound := func(b *testing.B, err error) {
		if !errors.Is(err, commands.ErrNotFound) {
			b.Fatal(err)
		}
	}
	for _, state := range []string{"queued", "cancelled"} {
		res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "b.get", Namespace: "other", Payload: commands.RawJSON(`{}`)})
		if err != nil {
			b.Fatal(err)
		}
		if state == "cancelled" {
			if _, err := st.Cancel(ctx, res.Job.ID, "bench"); err != nil {
				b.Fatal(err)
			}
		}
		id := res.Job.ID
		b.Run("other-"+state, func(b *testing.B) {
			for b.Loop() {
				_, err := st.ReadSeen(ctx, p, id)
				notFound(b, err)
			}
		})
		b.Run("notseen-"+state, func(b *testing.B) {
			for b.Loop() {
				notFound(b, st.NotSeen(ctx, id))
			}
		})
	}
	b.Run("unknown", func(b *testing.B) {
		for b.Loop() {
			_, err := st.ReadSeen(ctx, p, "01M85MKVAX5K4A16TR1GJCD5RN")
			notFound(b, err)
		}
	})
}
