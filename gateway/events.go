package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// Defaults of the events route.
const (
	defaultEventsLimit = 1000
	maxEventsLimit     = 10000
	sseKeepAlive       = 15 * time.Second
)

// eventList is a page of a job's history, oldest first.
type eventList struct {
	Events []*projections.EventView `json:"events"`
	// More says there are events after the last one; fetch them with
	// after=NextAfter.
	More      bool   `json:"more"`
	NextAfter uint64 `json:"next_after,omitempty"`
}

var errPageFull = errors.New("page full")

// GET /jobs/{id}/events: JSON, or Server-Sent Events with
// Accept: text/event-stream.
func (g *Gateway) jobEvents(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	q := r.URL.Query()
	var after uint64
	if s := q.Get("after"); s != "" {
		if after, err = strconv.ParseUint(s, 10, 64); err != nil {
			fail(w, r, &commands.InputError{Field: "after", Reason: fmt.Sprintf("%q: want an event sequence number", s)}, id)
			return
		}
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		if s := r.Header.Get("Last-Event-ID"); s != "" {
			if n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64); err == nil {
				after = n
			}
		}
		g.followEvents(w, r, id, after)
		return
	}
	limit := defaultEventsLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxEventsLimit {
			fail(w, r, &commands.InputError{Field: "limit", Reason: fmt.Sprintf("%q: want 1-%d", s, maxEventsLimit)}, id)
			return
		}
		limit = n
	}
	out := &eventList{Events: []*projections.EventView{}}
	err = g.store.History(r.Context(), id, after, false, func(e *domain.Event) error {
		if len(out.Events) == limit {
			out.More = true
			return errPageFull
		}
		out.Events = append(out.Events, projections.ViewEvent(e))
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		fail(w, r, err, id)
		return
	}
	if out.More {
		out.NextAfter = out.Events[len(out.Events)-1].Seq
	}
	writeJSON(w, http.StatusOK, out)
}

// followEvents streams a job's history after the given sequence, then its
// new events as they are appended, as Server-Sent Events whose ids are the
// event sequences (so a reconnecting EventSource resumes where it left
// off). After the terminal event it sends an "end" event and closes.
func (g *Gateway) followEvents(w http.ResponseWriter, r *http.Request, id string, after uint64) {
	snap, err := g.store.Read(r.Context(), id)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	if r.Method == http.MethodHead {
		sseHeaders(w)
		return
	}
	release, err := g.hold(w)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	defer release()
	sse, err := startSSE(w)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	if snap.Job.State.Terminal() && snap.Job.Seq <= after {
		sse.send("end", "", map[string]any{"state": snap.Job.State})
		return
	}
	ctx, cancel := g.revocable(r)
	defer cancel()
	stop := context.AfterFunc(g.base(), cancel)
	defer stop()
	evs := make(chan *domain.Event, 64)
	done := make(chan error, 1)
	go func() {
		done <- g.store.History(ctx, id, after, true, func(e *domain.Event) error {
			select {
			case evs <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		close(evs)
	}()
	ping := time.NewTicker(sseKeepAlive)
	defer ping.Stop()
	for {
		select {
		case e, ok := <-evs:
			if !ok {
				if err := <-done; err == nil {
					sse.send("end", "", map[string]any{"state": "terminal"})
				} else if ctx.Err() == nil {
					p := problemOf(err)
					p.JobID = id
					sse.send("error", "", p)
				}
				return
			}
			if sse.send("", strconv.FormatUint(e.Seq, 10), projections.ViewEvent(e)) != nil {
				return
			}
		case <-ping.C:
			if sse.comment("ping") != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// sseWriter writes Server-Sent Events.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) (*sseWriter, error) {
	sseHeaders(w)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	if err := s.rc.Flush(); err != nil {
		return nil, fmt.Errorf("streaming is not supported here: %w", err)
	}
	return s, nil
}

// sseHeaders writes the head of an event stream. HEAD on a streaming
// route is answered with it alone, at once: the stream is a body, and HEAD
// has none.
func sseHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
}

// send writes one event: its type (empty: "message"), id and JSON data.
func (s *sseWriter) send(event, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var sb strings.Builder
	if event != "" {
		sb.WriteString("event: " + event + "\n")
	}
	if id != "" {
		sb.WriteString("id: " + id + "\n")
	}
	sb.WriteString("data: ")
	sb.Write(b)
	sb.WriteString("\n\n")
	if _, err := s.w.Write([]byte(sb.String())); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sseWriter) comment(c string) error {
	if _, err := s.w.Write([]byte(": " + c + "\n\n")); err != nil {
		return err
	}
	return s.rc.Flush()
}
