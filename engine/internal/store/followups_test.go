package store

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/internal/domain"
)

// TestFollowUps: what a writer saw done of an event is taken once, for that
// event only; what came before a reconnection is not noted, and a
// reconnection or the cap forgets the rest (each forgotten one is verified
// by the Projector). A job is settled (nothing for the Projector to do)
// only when its record was written at the event and everything the job
// then implies was published and acknowledged.
func TestFollowUps(t *testing.T) {
	f := &followUps{}
	take := func(id string, seq uint64) FollowUp { got, _ := f.take(id, seq); return got }
	f.note("a", 5, false, 0)
	if take("a", 4) != NotSeen {
		t.Fatal("an earlier event of the job taken as done")
	}
	if take("a", 5) != FollowedUp {
		t.Fatal("the noted event not taken")
	}
	if take("a", 5) != NotSeen {
		t.Fatal("taken twice")
	}
	f.note("b", 3, true, 0)
	if take("b", 7) != NotSeen || take("b", 3) != NotSeen {
		t.Fatal("a later event taken as done, or the note kept past it")
	}
	// A job's last few events are each kept: the Projector, behind the
	// writers, reads an event of a job that moved on since.
	f.note("s", 5, true, 0)
	f.note("s", 7, false, 0)
	f.note("s", 6, true, 0) // older than the last noted: not noted
	f.note("s", 9, true, 0)
	if take("s", 5) != Settled || take("s", 6) != NotSeen || take("s", 7) != FollowedUp || take("s", 7) != NotSeen || take("s", 9) != Settled {
		t.Fatal("a job's earlier events not kept each")
	}
	for seq := range uint64(maxJobFollowUps + 2) {
		f.note("m", 10+seq, true, 0)
	}
	if take("m", 10) != NotSeen || take("m", 11) != NotSeen || take("m", 12) != Settled {
		t.Fatalf("not the last %d kept", maxJobFollowUps)
	}
	if take("m", 14) != Settled || take("m", 13) != NotSeen || take("m", 15) != Settled || take("m", 15) != NotSeen {
		t.Fatal("a later event's take did not forget the earlier ones, or forgot the later")
	}
	// An event done but for its record (a claim's, deferred): followed up
	// until a later settled event of the job, or its own record, settles it.
	f.noteRecordOnly("d1", 2, 0)
	f.note("d1", 3, true, 0)
	f.noteRecordOnly("d2", 2, 0)
	f.note("d2", 3, false, 0) // not settled: settles nothing
	f.noteRecordOnly("d3", 2, 0)
	f.recorded("d3", 2, 0)
	f.recorded("d4", 2, 0) // not noted: notes nothing
	f.note("d5", 1, false, 0)
	f.note("d5", 2, true, 0) // settles only what was noted record only
	if take("d1", 2) != Settled || take("d1", 3) != Settled || take("d2", 2) != FollowedUp || take("d3", 2) != Settled ||
		take("d4", 2) != NotSeen || take("d5", 1) != FollowedUp {
		t.Fatal("an event noted record only not settled by a later record, or something else settled")
	}
	f.noteRecordOnly("d6", 4, 0)
	if take("d6", 4) != FollowedUp {
		t.Fatal("an event noted record only, never settled, not followed up")
	}
	f.note("c", 1, false, 0)
	f.clear()
	f.note("d", 9, true, 1)
	f.note("e", 9, true, 0) // a write from before the clear
	if take("c", 1) != NotSeen || take("d", 9) != Settled || take("e", 9) != NotSeen {
		t.Fatal("kept through a clear")
	}
	for i := range maxFollowUps {
		f.note(strconv.Itoa(i), 1, false, 1)
	}
	f.note("past", 1, false, 1)
	if take("0", 1) != NotSeen || take("past", 1) != FollowedUp {
		t.Fatal("the cap did not start over")
	}

	srv := natsServer(t, -1)
	gone, back := make(chan struct{}, 1), make(chan struct{}, 1) // told after the Store's own handlers
	nc, err := nats.Connect(srv.ClientURL(), nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { tell(gone) }),
		nats.ReconnectHandler(func(*nats.Conn) { tell(back) }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s := &Store{nc: nc, followedUp: &followUps{}}
	s.watchReconnects()
	mark := s.FollowMark()
	job := func(id string, st domain.State, seq uint64, parent string) Version[domain.Job] {
		j := &domain.Job{ID: id, State: st, Seq: seq}
		j.Spec.Parent = parent
		return Version[domain.Job]{Rec: j, Last: seq}
	}
	ev := func(typ string, to domain.State, seq uint64) *domain.Event {
		return &domain.Event{Type: typ, To: to, Seq: seq}
	}
	for _, c := range []struct {
		what      string
		next      Version[domain.Job]
		ev        *domain.Event
		published int
		projected bool
		want      FollowUp
	}{
		{"a submit dispatched and projected", job("q1", domain.StateQueued, 1, ""), ev(domain.EvSubmitted, domain.StateQueued, 1), 1, true, Settled},
		{"a submit dispatched, its record reconciled", job("q2", domain.StateQueued, 1, ""), ev(domain.EvSubmitted, domain.StateQueued, 1), 1, false, FollowedUp},
		{"a queued job reprioritized: no dispatch published", job("q4", domain.StateQueued, 2, ""), ev(domain.EvReprioritized, "", 2), 0, true, NotSeen},
		{"a plain job that succeeded", job("s1", domain.StateSucceeded, 3, ""), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 0, true, Settled},
		{"a child that succeeded, its piece event published", job("c1", domain.StateSucceeded, 3, "p"), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 1, true, Settled},
		{"a child that succeeded, no piece event", job("c2", domain.StateSucceeded, 3, "p"), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 0, true, NotSeen},
		{"a plain job that succeeded, its record not written", job("s2", domain.StateSucceeded, 3, ""), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 0, false, FollowedUp},
		{"a claim, its record deferred", job("r0", domain.StateRunning, 2, ""), ev(domain.EvStarted, domain.StateRunning, 2), 0, false, FollowedUp},
		// Ended without succeeding: the Projector repeats its cascade.
		{"a plain job that failed", job("f1", domain.StateFailed, 3, ""), ev(domain.EvFailed, domain.StateFailed, 3), 0, true, NotSeen},
		{"a queued job cancelled", job("x1", domain.StateCancelled, 2, ""), ev(domain.EvCancelled, domain.StateCancelled, 2), 0, true, NotSeen},
	} {
		before := time.Now()
		s.afterDone(c.next, c.ev, c.published, c.projected, mark)
		got, at := s.Seen(c.next.Rec.ID, c.ev.Seq)
		if got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
		if (got == NotSeen) != at.IsZero() || got != NotSeen && (at.Before(before) || at.After(time.Now())) {
			t.Errorf("%s: seen %v at %v (noted after %v)", c.what, got, at, before)
		}
	}

	// The server restarts: a note made before is forgotten at the next look,
	// and a write that started before is not noted.
	s.afterDone(job("r1", domain.StateSucceeded, 3, ""), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 0, true, mark)
	port := srv.Addr().(*net.TCPAddr).Port
	srv.Shutdown()
	srv.WaitForShutdown()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the client did not see the server go")
	}
	if s.Steady(mark) {
		t.Fatal("steady with the server down")
	}
	natsServer(t, port)
	select {
	case <-back:
	case <-time.After(5 * time.Second):
		t.Fatal("the client did not come back")
	}
	if s.Steady(mark) || !s.Steady(s.FollowMark()) {
		t.Fatal("a write across a reconnection taken as steady, or one after it not")
	}
	s.afterDone(job("r2", domain.StateSucceeded, 3, ""), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 0, true, mark)
	if r1, _ := s.Seen("r1", 3); r1 != NotSeen {
		t.Fatal("a note from before the reconnection taken")
	}
	if r2, _ := s.Seen("r2", 3); r2 != NotSeen {
		t.Fatal("a note from before the reconnection, or a write across it, taken")
	}
	s.afterDone(job("r3", domain.StateSucceeded, 3, ""), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 0, true, s.FollowMark())
	if r3, _ := s.Seen("r3", 3); r3 != Settled {
		t.Fatal("a write after the reconnection not noted")
	}
}

func tell(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// natsServer starts a NATS server on port (-1: any).
func natsServer(t *testing.T, port int) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}
