package subscribe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjetstream "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Topic is the topic to subscribe to: jetflow's event log. Which of its
// events a Subscriber delivers is its Config.Filter.
const Topic = streams.EventsStream

// DefaultAckWait is Config.AckWait's default.
const DefaultAckWait = 30 * time.Second

// Filter selects events. Empty fields match everything.
type Filter struct {
	Namespace string // the job's namespace
	Queue     string // the job's queue
	Type      string // the job's type, e.g. "email.send"
	JobID     string // one job
	// Events are event types, e.g. "job.failed". The subject of an event
	// does not hold its type, so this part is applied by the subscriber: it
	// acks the events of other types without handing them over. A job fails
	// by job.failed, and also by job.lease_expired (its lease ran out too
	// often) and job.stalled (a fan-out parent whose pieces stopped
	// finishing).
	Events []string
}

// Subject is the part of the log the filter reads: the subject filter of
// the durable consumer, jetflow.ev.<namespace>.<queue>.<type>.<id> with *
// for what the filter leaves open.
func (f Filter) Subject() string {
	tok := func(s string, escape bool) string {
		switch {
		case s == "":
			return "*"
		case escape:
			return streams.Token(s)
		}
		return s
	}
	return streams.EventsPrefix + "." + tok(f.Namespace, true) + "." + tok(f.Queue, false) + "." +
		tok(f.Type, true) + "." + tok(f.JobID, false)
}

func (f Filter) validate() error {
	switch {
	case f.Namespace != "" && !domain.ValidNamespace(f.Namespace):
		return fmt.Errorf("subscribe: filter: invalid namespace %q", f.Namespace)
	case f.Queue != "" && !domain.ValidQueue(f.Queue):
		return fmt.Errorf("subscribe: filter: invalid queue %q", f.Queue)
	case f.Type != "" && !domain.ValidType(f.Type):
		return fmt.Errorf("subscribe: filter: invalid job type %q", f.Type)
	case f.JobID != "" && !domain.ValidID(f.JobID):
		return fmt.Errorf("subscribe: filter: invalid job id %q", f.JobID)
	}
	for _, e := range f.Events {
		if !strings.HasPrefix(e, "job.") || len(e) == len("job.") {
			return fmt.Errorf("subscribe: filter: invalid event type %q (job.<something>)", e)
		}
	}
	return nil
}

// Config configures a Subscriber. The zero value of every field but
// Durable means its default.
type Config struct {
	// Durable names the consumer that keeps the subscriber's place in the
	// log: 1-64 of [A-Za-z0-9_-]. Subscribers with the same durable share
	// its events (each goes to one of them); one with another durable gets
	// its own copy of every event.
	Durable string
	// Filter selects the events to deliver. Changing the filter of an
	// existing durable keeps its place in the log.
	Filter Filter
	// DeliverNew makes a new durable start with the events appended after
	// it is made, instead of the first event of the log. Where a durable
	// starts is fixed when it is made.
	DeliverNew bool
	// AckWait is how long a handler (with its retries: middleware.Retry
	// runs inside it) may take before the event is delivered again. Default
	// DefaultAckWait.
	AckWait time.Duration
	// NakDelay is how long a nacked event (its handler failed) waits before
	// it is delivered again: watermill-nats's jetstream.NewStaticDelay, or
	// NewMaxRetryDelay, which terminates it after a number of deliveries
	// (it is then never delivered again). Nil: at once.
	NakDelay wmjetstream.Delay
	// Logger is watermill's logger for the subscription. Default: none.
	Logger watermill.LoggerAdapter
}

func (c Config) withDefaults() Config {
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
	c.Filter.Events = slices.Clone(c.Filter.Events)
	return c
}

func (c Config) validate() error {
	if !validDurable(c.Durable) {
		return fmt.Errorf("subscribe: durable %q: want 1-64 of [A-Za-z0-9_-]", c.Durable)
	}
	if c.AckWait < 0 {
		return fmt.Errorf("subscribe: negative AckWait %s", c.AckWait)
	}
	return c.Filter.validate()
}

func validDurable(d string) bool {
	if d == "" || len(d) > 64 {
		return false
	}
	for _, c := range []byte(d) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ConsumerName is the name of the JetStream consumer of the events stream
// behind a durable. The prefix keeps a subscriber from taking over one of
// jetflow's own consumers of the log (the projector's, the fan-in's).
func ConsumerName(durable string) string { return "sub-" + durable }

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("subscribe: subscriber closed")

// Subscriber is a watermill message.Subscriber of jetflow's events.
type Subscriber struct {
	nc  *nats.Conn
	cfg Config

	mu     sync.Mutex
	closed bool
	subs   []*subscription
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a subscriber of the events that cfg.Filter selects,
// read through the durable consumer cfg.Durable of the events stream,
// which jetflow must have made (any jetflow process does when it starts).
// The subscriber uses nc and leaves it open when it closes.
func NewSubscriber(nc *nats.Conn, cfg Config) (*Subscriber, error) {
	if nc == nil {
		return nil, errors.New("subscribe: no NATS connection")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Subscriber{nc: nc, cfg: cfg}, nil
}

// Subscribe creates the durable consumer, or updates it to the subscriber's
// filter, and returns its events, one at a time: the next one comes once the
// last is acked or nacked. topic must be Topic. When ctx is done or the
// subscriber closes, the event in hand may still be acked or nacked (until
// AckWait), then the channel is closed; events the client had received and
// not handed over are nacked, so that they come again at once.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if topic != Topic {
		return nil, fmt.Errorf("subscribe: topic %q: a Subscriber reads %q (jetflow's event log); choose events with Config.Filter", topic, Topic)
	}
	// Held while the consumer is made, so that Close never meets a
	// subscription half made.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	sub := newSubscription(s.cfg)
	inner, err := wmjetstream.NewSubscriber(wmjetstream.SubscriberConfig{
		Conn:                s.nc,
		Logger:              s.cfg.Logger,
		AckWaitTimeout:      s.cfg.AckWait,
		ResourceInitializer: sub.consumer,
		NakDelay:            s.cfg.NakDelay,
		Unmarshaler:         unmarshaler{},
		AckAsync:            false, // DoubleAck: the ack is confirmed before the next event comes
	})
	if err != nil {
		sub.cancel()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	// Never inner.Close: it drains the connection, which is the caller's.
	// Cancelling sub.ctx ends the subscription.
	out, err := inner.Subscribe(sub.ctx, Topic)
	if err != nil {
		sub.cancel()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	s.subs = append(s.subs, sub)
	go func() {
		select {
		case <-ctx.Done():
			sub.stop()
		case <-sub.done:
		}
	}()
	return out, nil
}

// Close ends every subscription as Subscribe describes and returns once
// they have ended. The durable consumers stay, with their place in the
// log. Idempotent.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	var errs []error
	for _, sub := range subs {
		errs = append(errs, sub.stop())
	}
	return errors.Join(errs...)
}

// subscription is one Subscribe: watermill-nats's subscriber on the
// durable consumer, with deliver between the two, which hands it only the
// events the filter wants, and only until the subscription stops.
type subscription struct {
	cfg Config
	// ctx is the context of watermill-nats's subscription and of the
	// messages it hands out. It is not the caller's: a message's ack must
	// outlive the router's cancel, or the event would be handled twice.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	stopping bool
	inHand   chan struct{} // closed when the message in deliver is settled
	cc       jetstream.ConsumeContext

	once sync.Once
	err  error
	done chan struct{} // closed when stop is over
}

func newSubscription(cfg Config) *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	return &subscription{cfg: cfg, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// consumer is the subscription's watermill-nats ResourceInitializer: the
// durable consumer on the existing events stream, which it never creates or
// changes. It returns no closer, so the consumer outlives the subscriber.
func (s *subscription) consumer(ctx context.Context, js jetstream.JetStream, _ string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
	stream, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return nil, nil, fmt.Errorf("event stream %s (is jetflow running?): %w", streams.EventsStream, err)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       ConsumerName(s.cfg.Durable),
		Description:   "jetflow subscriber " + s.cfg.Durable,
		FilterSubject: s.cfg.Filter.Subject(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxDeliver:    -1,
	}
	if s.cfg.DeliverNew {
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	// The server refuses to change where a durable starts: keep it.
	switch c, err := stream.Consumer(ctx, cfg.Durable); {
	case err == nil:
		cfg.DeliverPolicy = c.CachedInfo().Config.DeliverPolicy
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, nil, fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	}
	c, err := stream.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	}
	return &consumer{Consumer: c, sub: s}, nil, nil
}

// consumer puts deliver between the durable consumer and watermill-nats's
// message handler, and keeps the consume context so that stop can wait for
// the consuming to end.
type consumer struct {
	jetstream.Consumer
	sub *subscription
}

func (c *consumer) Consume(handle jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	cc, err := c.Consumer.Consume(func(m jetstream.Msg) { c.sub.deliver(m, handle) }, opts...)
	if err == nil {
		c.sub.mu.Lock()
		c.sub.cc = cc
		c.sub.mu.Unlock()
	}
	return cc, err
}

// deliver is called with each message of the consumer, one at a time;
// handle (watermill-nats's) returns once the message was acked (AckSync),
// nacked, or not settled within AckWait.
func (s *subscription) deliver(m jetstream.Msg, handle jetstream.MessageHandler) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		// Received after the subscription stopped: back to the server at
		// once, rather than after AckWait.
		_ = m.Nak()
		return
	}
	inHand := make(chan struct{})
	s.inHand = inHand
	s.mu.Unlock()
	defer close(inHand)
	if !s.wants(m) {
		_ = m.Ack() // an event of no interest: one lost ack only brings it back here
		return
	}
	handle(m)
}

// wants applies the event-type filter. An event that does not decode goes
// to the handler, whose Event call reports it.
func (s *subscription) wants(m jetstream.Msg) bool {
	if len(s.cfg.Filter.Events) == 0 {
		return true
	}
	e, err := streams.DecodeEvent(m.Data())
	return err != nil || slices.Contains(s.cfg.Filter.Events, e.Type)
}

// stop ends the subscription: nothing more is handed over, the message in
// hand may still be settled (until AckWait), then watermill-nats's
// subscription is cancelled, which closes its channel and drains the
// consumer's buffer through deliver (nacked). Idempotent; returns when the
// consuming has ended.
func (s *subscription) stop() error {
	s.once.Do(func() {
		defer close(s.done)
		s.mu.Lock()
		s.stopping = true
		inHand := s.inHand
		s.mu.Unlock()
		if inHand != nil {
			select {
			case <-inHand:
			case <-time.After(s.cfg.AckWait):
				s.err = errors.New("subscribe: an event was not settled within AckWait; it will be delivered again")
			}
		}
		s.cancel()
		s.mu.Lock()
		cc := s.cc
		s.mu.Unlock()
		if cc != nil {
			select {
			case <-cc.Closed():
			case <-time.After(s.cfg.AckWait):
				s.err = errors.Join(s.err, errors.New("subscribe: the consumer did not drain within AckWait"))
			}
		}
	})
	<-s.done
	return s.err
}
