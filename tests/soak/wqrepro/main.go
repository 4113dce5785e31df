// Command wqrepro reproduces, without jetflow's engine, what tests/soak
// found twice in its long runs (docs/reliability.md, finding 1): a
// WorkQueue stream with one pull consumer, on a NATS server (`jetflow
// serve`'s embedded one) that is SIGKILLed and restarted while messages
// are delivered and not acked, can end with messages in the stream that the
// consumer counts as delivered and acked (0 pending, 0 ack pending, ack
// floor past them): no fetch ever returns them again.
//
//	go build -o /tmp/jetflow ./cmd/jetflow && go run ./tests/soak/wqrepro -jetflow /tmp/jetflow
//
// Four fetchers ack what they fetch, and one fetch in twenty keeps all but
// five of its messages unacked (a worker that died); the server is killed
// every 1.5-4 s. At the end everything is fetched and acked; it exits 1 if
// the stream still holds messages, and says which of them were acked
// (confirmed), delivered and never acked, or never delivered. It reproduced
// once in sixteen runs of 15 restarts on a 2-core machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func freeAddr() string {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	return l.Addr().String()
}

type buf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *buf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *buf) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

func start(dir, addr string) *exec.Cmd {
	cmd := exec.Command(*jetflowBin, "serve", "--data", dir, "--nats-listen", addr, "--http", "off")
	out := &buf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	for i := 0; i < 600 && !strings.Contains(out.String(), "jetflow is running"); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	return cmd
}

var (
	jetflowBin = flag.String("jetflow", "jetflow", "the jetflow binary (its serve runs the NATS server)")
	rounds     = flag.Int("rounds", 15, "server kills")
)

func main() {
	flag.Parse()
	dir, _ := os.MkdirTemp("", "wq")
	defer os.RemoveAll(dir)
	addr := freeAddr()
	srv := start(dir, addr)
	nc, err := nats.Connect("nats://"+addr, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
	if err != nil {
		panic(err)
	}
	cfg := jetstream.ConsumerConfig{Durable: "batch", FilterSubject: "r.batch.*", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxDeliver: -1, MaxAckPending: 4096}
	if _, err := js.CreateOrUpdateConsumer(ctx, "R", cfg); err != nil {
		panic(err)
	}
	var published, acked atomic.Int64
	var ackedMu sync.Mutex
	ackedSet := map[string]bool{}
	delivered := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Publisher: bursts of items of a parent each.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for p := 0; ; p++ {
			select {
			case <-stop:
				return
			default:
			}
			for i := 0; i < 100; i++ {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				if _, err := js.Publish(pctx, fmt.Sprintf("r.batch.P%d", p), []byte(fmt.Sprintf("P%d-%d", p, i))); err == nil {
					published.Add(1)
				}
				cancel()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// Workers: fetch, "process" 1 ms, ack; sometimes "die" (drop a fetched batch unacked).
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				c, err := js.Consumer(fctx, "R", "batch")
				cancel()
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				b, err := c.Fetch(16, jetstream.FetchMaxWait(time.Second))
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				die := rand.IntN(20) == 0
				k := 0
				for m := range b.Messages() {
					k++
					ackedMu.Lock()
					delivered[string(m.Data())]++
					ackedMu.Unlock()
					if die && k > 5 {
						continue // held, never acked: a killed worker
					}
					time.Sleep(time.Millisecond)
					actx, cancel := context.WithTimeout(ctx, 2*time.Second)
					if m.DoubleAck(actx) == nil {
						acked.Add(1)
						ackedMu.Lock()
						ackedSet[string(m.Data())] = true
						ackedMu.Unlock()
					}
					cancel()
				}
			}
		}()
	}
	for round := 1; round <= *rounds; round++ {
		time.Sleep(time.Duration(1500+rand.IntN(2500)) * time.Millisecond)
		_ = srv.Process.Signal(syscall.SIGKILL)
		_ = srv.Wait()
		if rand.IntN(2) == 0 {
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Millisecond)
		}
		srv = start(dir, addr)
		fmt.Printf("round %d: restarted; published %d acked %d\n", round, published.Load(), acked.Load())
	}
	close(stop)
	wg.Wait()
	// Drain: let every message be delivered and acked.
	var c jetstream.Consumer
	for c == nil {
		if c, err = js.Consumer(ctx, "R", "batch"); err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	idle := 0
	for idle < 5 {
		b, err := c.Fetch(500, jetstream.FetchMaxWait(time.Second))
		n := 0
		if err == nil {
			for m := range b.Messages() {
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				m.DoubleAck(actx)
				cancel()
				n++
			}
		}
		if n == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	time.Sleep(3 * time.Second)
	ci, _ := c.Info(ctx)
	info, _ := st.Info(ctx)
	fmt.Printf("end: stream holds %d msgs (first %d last %d); consumer %d pending, %d ack pending, ack floor %d, delivered %d\n",
		info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, ci.NumPending, ci.NumAckPending, ci.AckFloor.Stream, ci.Delivered.Stream)
	if info.State.Msgs > 0 {
		var wasAcked, notAcked, neverDelivered int
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue
			}
			switch {
			case ackedSet[string(m.Data)]:
				wasAcked++
			case delivered[string(m.Data)] > 0:
				notAcked++
			default:
				neverDelivered++
			}
		}
		fmt.Printf("stuck messages: %d had a confirmed ack, %d were delivered and never acked, %d were never delivered\n", wasAcked, notAcked, neverDelivered)
	}
	_ = srv.Process.Signal(syscall.SIGTERM)
	_ = srv.Wait()
	if info.State.Msgs > 0 {
		os.Exit(1)
	}
}
