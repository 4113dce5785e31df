package store

import (
	"context"
	"strconv"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// BatchMsg is a batch's work item as it is settled: the message a worker
// in this process fetched, or the ack subject of one a remote worker
// holds.
type BatchMsg interface {
	Ack() error
	Nak() error
	NakWithDelay(time.Duration) error
}

// SettleBatch carries out what was decided of a batch's attempt
// (commands.DecideBatch), by a worker in this process or outside it: its
// work item given back (now or after a delay), dropped, or acked once its
// piece event is in the log. An error says the piece event was not
// written (nothing was settled).
func (s *Store) SettleBatch(ctx context.Context, msg BatchMsg, item *domain.BatchItem, attempt int, step commands.BatchStep, actor string) error {
	switch {
	case step.Retry && step.Delay > 0:
		return msg.NakWithDelay(step.Delay)
	case step.Retry:
		return msg.Nak() // another worker takes it at once
	case step.Drop:
		return msg.Ack()
	}
	ev := &domain.Event{Type: step.Piece, JobID: item.Parent, Time: time.Now().UTC(), Piece: item.Piece,
		Attempt: attempt, Actor: actor, Error: step.Error}
	s.stamp(ctx, ev)
	if _, err := s.PublishPiece(ev, item.Parent+"-b"+strconv.Itoa(item.Piece)+"-done").Wait(ctx); err != nil {
		return err
	}
	crash("batch:recorded")
	return msg.Ack()
}
