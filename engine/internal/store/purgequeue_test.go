package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// TestPurgeQueueSubjectWhenTheStreamsCannotBeRead: a purge of a queue's
// subject whose streams cannot be read (here: its context ended, as when
// the Projector stops during a cascade) fails with that error. It panicked
// on the empty set of streams (CI, 2026-11-30).
func TestPurgeQueueSubjectWhenTheStreamsCannotBeRead(t *testing.T) {
	st := storetest.Open(t, testkit.Conn(t, testkit.Server(t)), "purger")
	ctx := testkit.Ctx(t)
	if err := st.Queues().Ensure(ctx, "pq"); err != nil {
		t.Fatal(err)
	}
	subject := streams.BatchSubject("pq", "t", "parent")
	if err := store.PurgeQueueSubject(st, ctx, "pq", subject); err != nil {
		t.Fatalf("purge: %v", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := store.PurgeQueueSubject(st, ended, "pq", subject); !errors.Is(err, context.Canceled) {
		t.Fatalf("purge with an ended context: %v, want context.Canceled", err)
	}
	if err := store.PurgeQueueSubject(st, ctx, "never-used", subject); err != nil {
		t.Fatalf("purge on a queue never used: %v", err)
	}
	if n := len((streams.QueueSet{}).All()); n != 0 {
		t.Fatalf("the zero set lists %d streams", n)
	}
}
