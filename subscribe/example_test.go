package subscribe_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/subscribe"
)

// A watermill router opens a ticket for every job that fails in namespace
// "shop"; a job failing elsewhere is none of its business.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jetflow-subscribe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := engine.StartServer(engine.ServerConfig{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := engine.ConnectInProcess(srv, "example")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	client, err := jetflow.NewClient(ctx, nc, jetflow.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	w := jetflow.NewWorker(client, jetflow.WorkerConfig{Logger: slog.New(slog.DiscardHandler)})
	jetflow.Register(w, "charge", func(ctx context.Context, job *jetflow.Job[any]) (any, error) {
		return nil, jetflow.Permanent(errors.New("card declined"))
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)

	sub, err := subscribe.NewSubscriber(nc, subscribe.Config{Durable: "tickets", Filter: subscribe.Filter{
		Namespace: "shop", Events: []string{"job.failed", "job.lease_expired", "job.stalled"}}})
	if err != nil {
		log.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	router.AddMiddleware(middleware.Recoverer, middleware.Retry{MaxRetries: 3, InitialInterval: 10 * time.Millisecond}.Middleware)
	opened := make(chan string, 10)
	router.AddConsumerHandler("tickets", subscribe.Topic, sub, func(msg *message.Message) error {
		ev, err := subscribe.Event(msg)
		if err != nil {
			return err
		}
		opened <- fmt.Sprintf("ticket: %s job in %s failed: %s",
			msg.Metadata.Get(subscribe.JobTypeKey), msg.Metadata.Get(subscribe.NamespaceKey), ev.Error.Message)
		return nil
	})
	go router.Run(ctx)
	defer router.Close()
	<-router.Running()

	if _, err := client.Submit(ctx, "charge", nil, jetflow.Namespace("test")); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Submit(ctx, "charge", nil, jetflow.Namespace("shop")); err != nil {
		log.Fatal(err)
	}
	select {
	case t := <-opened:
		fmt.Println(t)
	case <-time.After(30 * time.Second):
		fmt.Println("no ticket")
	}
	// Output: ticket: charge job in shop failed: permanent: card declined
}
