package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/lifecycle"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// latencyBuckets spread from 5ms to an hour.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// maxTracked bounds the jobs whose times the metrics consumer remembers.
const maxTracked = 1 << 20

// metrics is the gateway's Prometheus side. Counters and latency
// histograms are built by a consumer of the event log (every event of
// every writer, not only this gateway's requests): each gateway counts
// every event appended since it started, so aggregate gateways with max,
// not sum. Gauges (jobs by state, queue depth, workers, consumer lag) are
// read when scraped.
type metrics struct {
	g       *Gateway
	reg     *prometheus.Registry
	handler http.Handler
	log     *slog.Logger

	submitted *prometheus.CounterVec
	finished  *prometheus.CounterVec
	events    *prometheus.CounterVec
	wait      *prometheus.HistogramVec
	run       *prometheus.HistogramVec
	latency   *prometheus.HistogramVec

	life    lifecycle.Loop
	mu      sync.Mutex // guards track
	track   map[string]*jobTimes
	lastSeq atomic.Uint64
}

type jobTimes struct {
	created, queued, started time.Time
}

func newMetrics(g *Gateway, reg *prometheus.Registry) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &metrics{g: g, reg: reg, log: g.cfg.Log.With("component", "metrics"), track: map[string]*jobTimes{},
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetflow_jobs_submitted_total",
			Help: "Jobs submitted, by queue (job.submitted events)."}, []string{"queue"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetflow_jobs_finished_total",
			Help: "Jobs that reached a terminal state, by queue and state."}, []string{"queue", "state"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetflow_events_total",
			Help: "Events appended to the event log, by event type."}, []string{"type"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "jetflow_job_queue_wait_seconds",
			Help:    "Time from a job becoming queued (submit, due, requeue) to a worker taking it (started or claimed).",
			Buckets: latencyBuckets}, []string{"queue"}),
		run: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "jetflow_job_run_seconds",
			Help:    "Time from an attempt's start to its end, by queue and the state it ended in.",
			Buckets: latencyBuckets}, []string{"queue", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "jetflow_job_latency_seconds",
			Help:    "Time from submit to a terminal state, by queue and state.",
			Buckets: latencyBuckets}, []string{"queue", "state"}),
	}
	reg.MustRegister(m.submitted, m.finished, m.events, m.wait, m.run, m.latency, &scrapeCollector{m: m})
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(m.log.Handler(), slog.LevelWarn)})
	return m
}

// ServeHTTP serves /metrics.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }

// Start starts consuming the event log from its end. Idempotent.
func (m *metrics) Start(ctx context.Context) error {
	return m.life.Start(func() (func(context.Context), error) {
		cons, err := m.consumer(ctx)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) { m.loop(ctx, cons) }, nil
	})
}

// Stop stops consuming. Idempotent.
func (m *metrics) Stop(ctx context.Context) { m.life.Stop(ctx) }

func (m *metrics) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{streams.EventsPrefix + ".>"},
		DeliverPolicy: jetstream.DeliverNewPolicy}
	if seq := m.lastSeq.Load(); seq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	}
	cons, err := m.g.store.JS.OrderedConsumer(ctx, streams.EventsStream, cfg)
	if err != nil {
		return nil, fmt.Errorf("metrics consumer: %w", err)
	}
	return cons, nil
}

func (m *metrics) loop(ctx context.Context, cons jetstream.Consumer) {
	for ctx.Err() == nil {
		if cons == nil {
			var err error
			if cons, err = m.consumer(ctx); err != nil {
				m.log.Warn("metrics consumer", "err", err)
				sleep(ctx, time.Second)
				continue
			}
		}
		it, err := cons.Messages()
		if err != nil {
			m.log.Warn("metrics consumer", "err", err)
			cons = nil
			sleep(ctx, time.Second)
			continue
		}
		stop := context.AfterFunc(ctx, it.Stop)
		for {
			msg, err := it.Next()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					m.log.Warn("metrics consumer", "err", err)
				}
				break
			}
			m.observe(msg)
		}
		stop()
		it.Stop()
		cons = nil
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// observe counts one event. The subject jetflow.ev.<ns>.<queue>.<type>.<id>
// names its queue.
func (m *metrics) observe(msg jetstream.Msg) {
	if meta, err := msg.Metadata(); err == nil {
		m.lastSeq.Store(meta.Sequence.Stream)
	}
	tok := strings.Split(msg.Subject(), ".")
	if len(tok) != 6 {
		return
	}
	queue := tok[3]
	ev, err := streams.DecodeEvent(msg.Data())
	if err != nil {
		return
	}
	m.events.WithLabelValues(ev.Type).Inc()
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.track[ev.JobID]
	if ev.Type == domain.EvSubmitted {
		m.submitted.WithLabelValues(queue).Inc()
		if t == nil && len(m.track) < maxTracked {
			t = &jobTimes{created: ev.Time}
			m.track[ev.JobID] = t
		}
	}
	if t == nil {
		// Submitted before this gateway started: count its end, time nothing.
		if ev.To.Terminal() {
			m.finished.WithLabelValues(queue, string(ev.To)).Inc()
		}
		return
	}
	if projections.LeavesQueue(ev) && !t.queued.IsZero() {
		m.wait.WithLabelValues(queue).Observe(ev.Time.Sub(t.queued).Seconds())
		t.queued = time.Time{}
	}
	if ev.Type == domain.EvStarted {
		t.started = ev.Time
	}
	if projections.EndsRun(ev) && !t.started.IsZero() {
		m.run.WithLabelValues(queue, string(ev.To)).Observe(ev.Time.Sub(t.started).Seconds())
		t.started = time.Time{}
	}
	if projections.EntersQueue(ev) {
		t.queued = ev.Time
	}
	if ev.To.Terminal() {
		m.finished.WithLabelValues(queue, string(ev.To)).Inc()
		m.latency.WithLabelValues(queue, string(ev.To)).Observe(ev.Time.Sub(t.created).Seconds())
		delete(m.track, ev.JobID)
	}
}

// scrapeCollector reads the gauges when /metrics is scraped.
type scrapeCollector struct{ m *metrics }

var (
	descJobs = prometheus.NewDesc("jetflow_jobs", "Jobs by state (from the gateway's index of the jobs bucket).",
		[]string{"state"}, nil)
	descDepth = prometheus.NewDesc("jetflow_queue_depth", "Runnable jobs waiting for a worker.", []string{"queue"}, nil)
	descHeld  = prometheus.NewDesc("jetflow_queue_held", "Work items held by workers (claimed or running jobs).",
		[]string{"queue"}, nil)
	descDelayed = prometheus.NewDesc("jetflow_queue_delayed", "Scheduled jobs and retries in backoff.", []string{"queue"}, nil)
	descPaused  = prometheus.NewDesc("jetflow_queue_paused", "1 if the queue is paused.", []string{"queue"}, nil)
	descRunning = prometheus.NewDesc("jetflow_jobs_running", "Jobs claimed or running, by queue.", []string{"queue"}, nil)
	descLimit   = prometheus.NewDesc("jetflow_queue_limit", "A queue's limits (quotas; docs/quotas.md), 0 for none: max_running, max_running_per_user, max_running_per_key, rate_limit (admissions per rate_period_seconds).",
		[]string{"queue", "limit"}, nil)
	descSlots = prometheus.NewDesc("jetflow_queue_slots", "Jobs of a queue with limits holding a slot (running: queued after admission, claimed, running) or waiting for one (pending), as its admitter counts them.",
		[]string{"queue", "state"}, nil)
	descWorkers = prometheus.NewDesc("jetflow_workers", "Registered remote workers; live: heartbeat within the lease.",
		[]string{"live"}, nil)
	descLag = prometheus.NewDesc("jetflow_consumer_lag_events",
		"Events of the event log a consumer has not processed: events on its subjects not yet delivered plus those delivered and not acked (durable consumers, e.g. the projector, the fan-in counter), or the log's last sequence minus its last delivered event (this gateway's metrics consumer).",
		[]string{"consumer"}, nil)
	descOpen = prometheus.NewDesc("jetflow_http_open_streams",
		"Requests this gateway holds open: event streams and long polls (at most Config.MaxStreams).", nil, nil)
	descLastSeq = prometheus.NewDesc("jetflow_event_log_last_sequence", "Sequence of the last event in the event log.", nil, nil)
)

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descDepth, descHeld, descDelayed, descPaused, descRunning, descLimit, descSlots,
		descWorkers, descLag, descOpen, descLastSeq} {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.m.g
	ctx, cancel := context.WithTimeout(g.base(), 5*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descOpen, float64(len(g.open)))
	select {
	case <-g.index.Synced():
		for st, n := range g.index.Counts("", "") {
			gauge(descJobs, float64(n), string(st))
		}
	default:
	}
	if qs, err := g.cachedQueues(ctx); err == nil {
		for _, q := range qs {
			gauge(descDepth, float64(q.Depth), q.Name)
			gauge(descHeld, float64(q.Held), q.Name)
			gauge(descDelayed, float64(q.Delayed), q.Name)
			paused := 0.0
			if q.Paused {
				paused = 1
			}
			gauge(descPaused, paused, q.Name)
			gauge(descRunning, float64(q.Running), q.Name)
			if q.MaxRunning > 0 || q.MaxRunningPerUser > 0 || q.MaxRunningPerKey > 0 || q.RateLimit > 0 || q.Slots != nil {
				gauge(descLimit, float64(q.MaxRunning), q.Name, "max_running")
				gauge(descLimit, float64(q.MaxRunningPerUser), q.Name, "max_running_per_user")
				gauge(descLimit, float64(q.MaxRunningPerKey), q.Name, "max_running_per_key")
				gauge(descLimit, float64(q.RateLimit), q.Name, "rate_limit")
				gauge(descLimit, time.Duration(q.RatePeriod).Seconds(), q.Name, "rate_period_seconds")
			}
			if q.Slots != nil {
				gauge(descSlots, float64(q.Slots.Holding), q.Name, "running")
				gauge(descSlots, float64(q.Slots.Pending), q.Name, "pending")
			}
		}
	} else {
		c.m.log.Warn("scrape queues", "err", err)
	}
	if recs, err := g.cachedWorkers(ctx); err == nil {
		live, stale := 0, 0
		for _, rec := range recs {
			if g.workers.View(rec).Live {
				live++
			} else {
				stale++
			}
		}
		gauge(descWorkers, float64(live), "true")
		gauge(descWorkers, float64(stale), "false")
	}
	info, err := g.store.Events.Info(ctx)
	if err != nil {
		c.m.log.Warn("scrape event log", "err", err)
		return
	}
	last := info.State.LastSeq
	gauge(descLastSeq, float64(last))
	// Each once (streams.Consumers): a sample twice would fail the scrape.
	consumers, err := streams.Consumers(ctx, g.store.Events)
	if err != nil {
		c.m.log.Warn("scrape consumers", "err", err)
	}
	for _, ci := range consumers {
		if ci.Config.Durable == "" {
			continue
		}
		// What the consumer has yet to deliver and to see acked. Not the
		// log's last sequence minus the ack floor: a filtered consumer
		// (the fan-in counter) would lag by every event it does not take.
		gauge(descLag, float64(ci.NumPending+uint64(ci.NumAckPending)), ci.Name)
	}
	if seq := c.m.lastSeq.Load(); seq > 0 || last == 0 {
		gauge(descLag, float64(last-min(last, seq)), "gateway_metrics")
	}
}
