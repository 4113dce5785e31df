package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestPromoterEndsWhenItsConnectionCloses: a promoter whose connection was
// closed under it (nats.go then ends its watch of the queues) ends its
// loop, as a closed connection never comes back, and stops cleanly. It
// used to watch again every second until told to stop, then call Stop on
// no watch: a panic that took the process down.
func TestPromoterEndsWhenItsConnectionCloses(t *testing.T) {
	srv := testkit.Server(t)
	nc := testkit.Conn(t, srv)
	p := maintenance.NewPromoter(storetest.Open(t, nc, "engine"), maintenance.PromoterConfig{Log: testkit.Logger(t)})
	if err := p.Start(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	testkit.WaitFor(t, 20*time.Second, func() error {
		if !maintenance.PromoterEnded(p) {
			return testkit.Errorf("the promoter still runs on a closed connection")
		}
		return nil
	})
	p.Stop(context.Background())
}
