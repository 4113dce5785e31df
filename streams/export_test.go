package streams

import (
	"time"

	"github.com/nats-io/nats.go"
)

// maxMsgpackDepth for the external tests.
const MaxMsgpackDepth = maxMsgpackDepth

// SetAnswerWait sets answerWait and answerWaitLong for a test and returns
// what restores them.
func SetAnswerWait(d, long time.Duration) (restore func()) {
	old, oldLong := answerWait, answerWaitLong
	answerWait, answerWaitLong = d, long
	return func() { answerWait, answerWaitLong = old, oldLong }
}

// Hold keeps g from sending: appends queue as they would behind a batch
// on its way. The returned func lets it go on.
func (g *GroupCommit) Hold() (release func()) {
	g.mu.Lock()
	busy := g.busy
	g.busy = true
	g.mu.Unlock()
	if busy {
		panic("Hold: the group commit is sending")
	}
	return func() { go g.run() }
}

// ErrAbandoned for the external tests.
var ErrAbandoned = errAbandoned

// AppendDataAsync appends encoded data as an event (AppendMsgAsync of a
// message without headers).
func (w Writer) AppendDataAsync(subject string, data []byte, expectSeq uint64, expectOn string) Future {
	return w.AppendMsgAsync(&nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}, expectSeq, expectOn)
}
