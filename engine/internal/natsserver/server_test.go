package natsserver

import (
	"strings"
	"testing"
	"time"
)

// Under SyncAlways the jobs bucket and the queue streams persist
// asynchronously, fsynced every SyncInterval, and the Projector holds what
// it vouches for only DefaultSyncInterval and a margin: a longer interval
// is refused, before anything starts.
func TestSyncAlwaysRefusesALongerInterval(t *testing.T) {
	dir := t.TempDir()
	_, err := Start(Config{Dir: dir, SyncAlways: true, SyncInterval: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "at most 1s") {
		t.Fatalf("SyncAlways with a 2s interval: %v", err)
	}
	s, err := Start(Config{Dir: dir, SyncAlways: true, SyncInterval: DefaultSyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
}
