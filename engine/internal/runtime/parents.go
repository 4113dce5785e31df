package runtime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
)

// parentCache caches whether parents are terminal, for batch workers, which
// check it before every batch: a terminal parent stays terminal, and a
// running one is read again after a second.
type parentCache struct {
	store   *store.Store
	mu      sync.Mutex
	entries map[string]parentEntry
}

type parentEntry struct {
	terminal bool
	at       time.Time
}

// forget drops what the cache knows of parent id: it was just cancelled.
func (c *parentCache) forget(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.mu.Unlock()
}

func (c *parentCache) terminal(ctx context.Context, id string) bool {
	c.mu.Lock()
	e, ok := c.entries[id]
	c.mu.Unlock()
	if ok && (e.terminal || time.Since(e.at) < time.Second) {
		return e.terminal
	}
	snap, err := c.store.Record(ctx, id)
	t := err == nil && snap.Job.State.Terminal() || errors.Is(err, commands.ErrNotFound)
	c.mu.Lock()
	if c.entries == nil || len(c.entries) > 10000 {
		c.entries = map[string]parentEntry{}
	}
	c.entries[id] = parentEntry{terminal: t, at: time.Now()}
	c.mu.Unlock()
	return t
}
