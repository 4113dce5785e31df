package commands

import (
	"testing"

	"github.com/jetflow/jetflow/internal/domain"
)

// Every question about a state, for every state: the table is the rule.
func TestStateQuestions(t *testing.T) {
	type answers struct{ held, dispatch, inQueue, admission, pieces, cancelled, settled, dueLater bool }
	want := map[domain.State]answers{
		domain.StatePending:   {admission: true},
		domain.StateScheduled: {dispatch: true, dueLater: true},
		domain.StateQueued:    {dispatch: true, inQueue: true},
		domain.StateClaimed:   {held: true},
		domain.StateRunning:   {held: true},
		domain.StateWaiting:   {pieces: true},
		domain.StateSucceeded: {settled: true},
		domain.StateFailed:    {settled: true},
		domain.StateCancelled: {cancelled: true},
	}
	if len(want) != len(domain.States) {
		t.Fatalf("the table has %d states, the lifecycle %d", len(want), len(domain.States))
	}
	for _, s := range domain.States {
		got := answers{HeldState(s), Dispatchable(s), InQueue(s), InAdmission(s), AwaitsPieces(s), WasCancelled(s), Settled(s), DueLater(s)}
		if got != want[s] {
			t.Errorf("%s: got %+v, want %+v", s, got, want[s])
		}
		if !StateWord(s) {
			t.Errorf("%s is not a state word", s)
		}
	}
	if !StateWord(StateRetryLater) || StateWord("done") {
		t.Error("StateWord: retry_later is a report's word, done is not")
	}
	for s, want := range map[domain.State]string{domain.StateSucceeded: domain.PcSucceeded, domain.StateFailed: domain.PcFailed, domain.StateCancelled: domain.PcCancelled} {
		if got := PieceOutcome(s); got != want {
			t.Errorf("PieceOutcome(%s) = %s, want %s", s, got, want)
		}
	}
	if ReportEnds("") || ReportEnds(domain.StateRunning) || !ReportEnds(domain.StateSucceeded) || !ReportEnds(StateRetryLater) {
		t.Error("ReportEnds: only a state other than running ends an attempt")
	}
	if !BatchReportable(StateRetryLater) || BatchReportable(domain.StateQueued) || BatchReportable(domain.StateWaiting) {
		t.Error("BatchReportable: succeeded, failed and retry_later only")
	}
}
