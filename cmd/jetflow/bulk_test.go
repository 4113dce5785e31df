package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestCLIBulk: bulk retry and cancel select as ls does, say how many, need
// --yes without a terminal, change each job once, skip what does not apply,
// and a second retry of the same failures runs none twice.
func TestCLIBulk(t *testing.T) {
	e := newCLIEnv(t)
	var failed []string
	for range 3 {
		out, errs, code := e.jetflow("submit", "demo.fail", `{"times":5}`, "--max-retries", "0", "--wait", "--json")
		var job struct{ ID, State string }
		if code != exitFailed || json.Unmarshal([]byte(out), &job) != nil || job.State != "failed" {
			t.Fatalf("submit: %d %q %s", code, out, errs)
		}
		failed = append(failed, job.ID)
	}
	if _, errs, code := e.jetflow("submit", "demo.echo", `{}`, "--wait"); code != exitOK {
		t.Fatalf("submit echo: %d %s", code, errs)
	}
	for _, bad := range [][]string{{"bulk"}, {"bulk", "frob", "--state", "failed"}, {"bulk", "retry", "--state", ""},
		{"bulk", "retry", "--since", "-1h"}, {"bulk", "retry", "--reason", "x"}, {"bulk", "retry", "cancel"}} {
		if _, errs, code := e.jetflow(bad...); code != exitUsage {
			t.Fatalf("%v: %d %s", bad, code, errs)
		}
	}
	var res bulkResult
	out, errs, code := e.jetflow("bulk", "retry", "--state", "failed", "--type", "demo.fail", "--dry-run", "--json")
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Matched != 3 || res.Changed != 0 || !res.DryRun {
		t.Fatalf("dry run: %d %q %s", code, out, errs)
	}
	// Without a terminal to confirm on, --yes is needed; nothing changes.
	if _, errs, code := e.jetflow("bulk", "retry", "--state", "failed", "--type", "demo.fail"); code != exitUsage || !strings.Contains(errs, "--yes") {
		t.Fatalf("without --yes: %d %s", code, errs)
	}
	out, errs, code = e.jetflow("bulk", "retry", "--state", "failed", "--type", "demo.fail", "--yes", "--json")
	res = bulkResult{}
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Matched != 3 || res.Changed != 3 || res.Skipped != 0 || res.Failed != 0 {
		t.Fatalf("retry: %d %q %s", code, out, errs)
	}
	// Each failure has exactly one retry; they fail too (demo.fail 5 times).
	testkit.WaitFor(t, 30*time.Second, func() error {
		out, _, _ := e.jetflow("ls", "--state", "failed", "--type", "demo.fail", "--limit", "0", "--json")
		var l struct {
			Jobs []struct {
				ID      string
				RetryOf string `json:"retry_of"`
			}
		}
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			return err
		}
		retries := map[string]int{}
		for _, j := range l.Jobs {
			if j.RetryOf != "" {
				retries[j.RetryOf]++
			}
		}
		for _, id := range failed {
			if retries[id] != 1 {
				return fmt.Errorf("%s has %d failed retries: %v", id, retries[id], l.Jobs)
			}
		}
		return nil
	})
	// Again: the originals were retried already (skipped); the retries run once.
	out, errs, code = e.jetflow("bulk", "retry", "--state", "failed", "--type", "demo.fail", "--yes", "--json")
	res = bulkResult{}
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Matched != 6 || res.Changed != 3 || res.Skipped != 3 {
		t.Fatalf("second retry: %d %q %s", code, out, errs)
	}
	// Cancel: the queued jobs of a queue no worker serves are cancelled;
	// a second time they are skipped.
	for range 2 {
		if _, errs, code := e.jetflow("submit", "demo.echo", `{}`, "--queue", "held"); code != exitOK {
			t.Fatalf("submit held: %d %s", code, errs)
		}
	}
	out, errs, code = e.jetflow("bulk", "cancel", "--queue", "held", "--reason", "bad deploy", "--yes")
	if code != exitOK || !strings.Contains(out, "cancel: 2 selected, 2 changed, 0 skipped, 0 failed") {
		t.Fatalf("cancel: %d %q %s", code, out, errs)
	}
	out, _, _ = e.jetflow("ls", "--queue", "held", "--state", "cancelled", "--json")
	var l struct{ Jobs []struct{ ID string } }
	if json.Unmarshal([]byte(out), &l) != nil || len(l.Jobs) != 2 {
		t.Fatalf("cancelled: %q", out)
	}
	out, _, _ = e.jetflow("events", l.Jobs[0].ID, "--json")
	if !strings.Contains(out, "bad deploy") {
		t.Fatalf("the cancel's reason is not in the events: %s", out)
	}
	out, errs, code = e.jetflow("bulk", "cancel", "--queue", "held", "--yes")
	if code != exitOK || !strings.Contains(out, "cancel: 2 selected, 0 changed, 2 skipped, 0 failed") {
		t.Fatalf("cancel again: %d %q %s", code, out, errs)
	}

	// Purge: the cancelled jobs of queue held and a queued one (skipped:
	// not finished); their records are gone, their events stay.
	if _, errs, code := e.jetflow("submit", "demo.echo", `{}`, "--queue", "held"); code != exitOK {
		t.Fatalf("submit held: %d %s", code, errs)
	}
	out, errs, code = e.jetflow("bulk", "purge", "--queue", "held", "--reason", "test data", "--yes")
	if code != exitOK || !strings.Contains(out, "purge: 3 selected, 2 changed, 1 skipped, 0 failed") {
		t.Fatalf("purge: %d %q %s", code, out, errs)
	}
	for _, j := range l.Jobs {
		// The answer is the job.purged event's: when, and why.
		if _, errs, code := e.jetflow("get", j.ID); code == exitOK || !strings.Contains(errs, "purged at") || !strings.Contains(errs, "(test data)") {
			t.Fatalf("get of a purged job: %d %s", code, errs)
		}
	}
	out, _, _ = e.jetflow("ls", "--queue", "held", "--json")
	if json.Unmarshal([]byte(out), &l) != nil || len(l.Jobs) != 1 {
		t.Fatalf("left in held: %q", out)
	}
}

// TestCLIBulkFailedPieces: bulk retry --failed-pieces runs again only the
// failed batches of each fan-out selected and skips a job that did not fan
// out; with another action the flag is refused, naming it.
func TestCLIBulkFailedPieces(t *testing.T) {
	e := newCLIEnv(t)
	var fans []string
	for range 2 {
		out, errs, code := e.jetflow("submit", "demo.fanout", `{"batches":10,"fail_every":5,"batch_ms":1}`, "--wait", "--json")
		var job struct{ ID, State string }
		if code != exitFailed || json.Unmarshal([]byte(out), &job) != nil || job.State != "failed" {
			t.Fatalf("submit fan-out: %d %q %s", code, out, errs)
		}
		fans = append(fans, job.ID)
	}
	if _, errs, code := e.jetflow("submit", "demo.fail", `{"times":5}`, "--max-retries", "0", "--wait"); code != exitFailed {
		t.Fatalf("submit demo.fail: %d %s", code, errs)
	}
	if _, errs, code := e.jetflow("bulk", "cancel", "--state", "failed", "--failed-pieces", "--yes"); code != exitUsage ||
		!strings.Contains(errs, "--failed-pieces") {
		t.Fatalf("cancel --failed-pieces: %d %s", code, errs)
	}
	out, errs, code := e.jetflow("bulk", "retry", "--state", "failed", "--failed-pieces", "--yes", "--json")
	var res bulkResult
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Action != "retry-failed-pieces" ||
		res.Matched != 3 || res.Changed != 2 || res.Skipped != 1 || res.Failed != 0 {
		t.Fatalf("bulk retry --failed-pieces: %d %q %s", code, out, errs)
	}
	// Each fan-out has one retry of its failed pieces only: the two broken
	// batches run again (and fail again), the eight others are carried.
	for _, id := range fans {
		testkit.WaitFor(t, 30*time.Second, func() error {
			jobs, err := e.cl.List(context.Background(), jetflow.ListFilter{Type: "demo.fanout"})
			if err != nil {
				return err
			}
			n := 0
			for _, j := range jobs {
				if j.RetryOf != id {
					continue
				}
				n++
				if !j.FailedPieces || j.State != jetflow.Failed {
					return fmt.Errorf("retry %s of %s: failed_pieces %v, %s", j.ID, id, j.FailedPieces, j.State)
				}
				full, err := e.cl.Get(context.Background(), j.ID)
				if err != nil {
					return err
				}
				if f := full.Fanout; f == nil || f.Total != 10 || f.Succeeded != 8 || f.Failed != 2 {
					return fmt.Errorf("retry %s of %s: %+v", j.ID, id, f)
				}
			}
			if n != 1 {
				return fmt.Errorf("%s has %d retries", id, n)
			}
			return nil
		})
	}
	// The same through the command protocol (a token client): the job that
	// did not fan out is skipped there too (the engine's refusal comes back
	// as a problem, not an InputError), the retries' failed pieces run again.
	out, errs, code = e.jetflow("bulk", "retry", "--state", "failed", "--failed-pieces", "--yes", "--json", "--token", "jft_unchecked")
	res = bulkResult{}
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Matched != 5 || res.Changed != 2 || res.Skipped != 3 || res.Failed != 0 {
		t.Fatalf("bulk retry --failed-pieces with a token: %d %q %s", code, out, errs)
	}
}

// TestCLIBulkConfirmsOnATerminal: on a terminal (a real pseudo-terminal)
// bulk asks "[y/N]" with the count; anything but y changes nothing and
// exits 1; y cancels them.
func TestCLIBulkConfirmsOnATerminal(t *testing.T) {
	e := newCLIEnv(t)
	for range 2 {
		if _, errs, code := e.jetflow("submit", "demo.echo", `{}`, "--queue", "asked"); code != exitOK {
			t.Fatalf("submit: %d %s", code, errs)
		}
	}
	for _, c := range []struct {
		answer, says string
		code         int
		cancelled    int
	}{
		{"n\n", "nothing changed", exitFailed, 0},
		{"\n", "nothing changed", exitFailed, 0},
		{"y\n", "cancel: 2 selected, 2 changed, 0 skipped, 0 failed", exitOK, 2},
	} {
		master, tty := openPTY(t)
		seen := make(chan string, 1)
		go func() { // what the terminal shows; answer once asked
			var b bytes.Buffer
			buf := make([]byte, 512)
			answered := false
			for {
				n, err := master.Read(buf)
				b.Write(buf[:n])
				if !answered && strings.Contains(b.String(), "[y/N] ") {
					answered = true
					master.Write([]byte(c.answer))
				}
				if err != nil {
					seen <- b.String()
					return
				}
			}
		}()
		var out bytes.Buffer
		code := runIn([]string{"bulk", "--nats", e.url, "cancel", "--queue", "asked"}, tty, &out, tty)
		tty.Close()
		shown := <-seen
		master.Close()
		if code != c.code || !strings.Contains(shown, "cancel 2 jobs? [y/N] ") || !strings.Contains(shown+out.String(), c.says) {
			t.Fatalf("answer %q: exit %d, terminal %q, out %q", c.answer, code, shown, out.String())
		}
		jobs, err := e.cl.List(context.Background(), jetflow.ListFilter{Queue: "asked", State: jetflow.Cancelled})
		if err != nil || len(jobs) != c.cancelled {
			t.Fatalf("answer %q: %d cancelled (%v)", c.answer, len(jobs), err)
		}
	}
}

// openPTY opens a pseudo-terminal: its master side, and its terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// bulk cancel --state S skips a job that has moved on since the list
// selected it (as get shows it): selected queued, running by its turn, it
// is not cancelled.
func TestCLIBulkCancelSkipsMovedOn(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testkit.Ctx(t)
	selected, err := e.cl.Submit(ctx, "bulk.moved", nil)
	if err != nil {
		t.Fatal(err)
	}
	st := testkit.StoreOf(t, e.cl)
	sub, err := st.Record(ctx, selected.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Apply(ctx, "claim", sub, func(j *domain.Job) (*domain.Event, error) {
		return commands.Start(j, "w1", 1, time.Now().UTC())
	}); err != nil {
		t.Fatal(err)
	}
	changed, skipped, err := bulkOne(ctx, e.cl, "cancel", selected, jetflow.Queued, "r", nil)
	if err != nil || changed || !skipped {
		t.Fatalf("bulk cancel of a job selected queued, now running: changed %v skipped %v %v", changed, skipped, err)
	}
	if got, err := e.cl.Get(ctx, selected.ID); err != nil || got.State != jetflow.Running {
		t.Fatalf("job %+v %v, want running", got, err)
	}
}
