// Command subscribe prints a line for every job that fails, from jetflow's
// event log, with a watermill router. Run it next to `jetflow serve --demo`:
//
//	go run ./examples/subscribe
//	go run ./cmd/jetflow submit demo.fail '{"times":3}' --max-retries 0
//
// It reads through the durable consumer "example-failures": stop it (Ctrl-C),
// fail more jobs, start it again, and it prints those, and none twice.
// -new makes a new durable skip the failures already in the log.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/subscribe"
)

func main() {
	url := os.Getenv("JETFLOW_NATS")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	flag.StringVar(&url, "nats", url, "NATS URL ($JETFLOW_NATS)")
	durable := flag.String("durable", "example-failures", "durable consumer name: where this subscriber is in the log")
	namespace := flag.String("namespace", "", "only jobs of this namespace (default: all)")
	deliverNew := flag.Bool("new", false, "a new durable starts after the events already in the log")
	flag.Parse()

	nc, err := nats.Connect(url, nats.Name("jetflow-example-subscribe"))
	if err != nil {
		log.Fatalf("connect to NATS at %s: %v", url, err)
	}
	defer nc.Close()

	// A job fails by job.failed, or by job.lease_expired and job.stalled.
	sub, err := subscribe.NewSubscriber(nc, subscribe.Config{
		Durable:    *durable,
		DeliverNew: *deliverNew,
		Filter: subscribe.Filter{Namespace: *namespace,
			Events: []string{"job.failed", "job.lease_expired", "job.stalled"}},
	})
	if err != nil {
		log.Fatal(err)
	}

	logger := watermill.NewSlogLogger(nil)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		log.Fatal(err)
	}
	router.AddMiddleware(
		middleware.Recoverer, // a panic is an error, which Retry retries
		middleware.Retry{MaxRetries: 3, InitialInterval: 100 * time.Millisecond, Logger: logger}.Middleware,
	)
	router.AddConsumerHandler("print-failures", subscribe.Topic, sub, printFailure)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		router.Close() // lets the event in hand finish and be acked
	}()
	if err := router.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// printFailure is the handler: msg.UUID is the event's sequence in the log,
// a key for handlers that must not act twice.
func printFailure(msg *message.Message) error {
	ev, err := subscribe.Event(msg)
	if err != nil {
		return err
	}
	reason := ""
	if ev.Error != nil {
		reason = ev.Error.Message
	}
	fmt.Printf("%s  event %s  job %s (%s, namespace %s, queue %s) %s after %d attempt(s): %s\n",
		ev.Time.Local().Format(time.TimeOnly), msg.UUID, ev.JobID, msg.Metadata.Get(subscribe.JobTypeKey),
		msg.Metadata.Get(subscribe.NamespaceKey), msg.Metadata.Get(subscribe.QueueKey), ev.Type, ev.Attempt, reason)
	return nil
}
