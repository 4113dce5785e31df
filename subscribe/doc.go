// Package subscribe runs your own handlers on jetflow's events with
// watermill: a Subscriber reads the event log (stream JETFLOW_EVENTS) through
// a durable JetStream consumer, so a watermill Router, with its middleware
// (Retry, Recoverer, PoisonQueue...), gets every event that matches a Filter,
// and picks up where it stopped after a restart.
//
//	sub, err := subscribe.NewSubscriber(nc, subscribe.Config{Durable: "tickets",
//		Filter: subscribe.Filter{Namespace: "billing", Events: []string{"job.failed"}}})
//	router.AddConsumerHandler("tickets", subscribe.Topic, sub, func(msg *message.Message) error {
//		ev, err := subscribe.Event(msg) // the jetflow.EventInfo the SDK returns
//		...
//	})
//
// An event whose handler returned nil is acknowledged synchronously (the
// server has recorded the ack before the next event is handed over), so it
// is never delivered to that durable again, across restarts. An event whose
// handler failed, or that was still being handled when a process died, is
// delivered again: handlers run at least once, and msg.UUID (the event's
// stream sequence) is the key that makes them idempotent.
//
// The subscriber is built on watermill-nats's JetStream subscriber; it never
// creates or changes the event stream, only its own consumer.
package subscribe
