package streams

import "time"

// maxMsgpackDepth for the external tests.
const MaxMsgpackDepth = maxMsgpackDepth

// SetAnswerWait sets answerWait and answerWaitLong for a test and returns
// what restores them.
func SetAnswerWait(d, long time.Duration) (restore func()) {
	old, oldLong := answerWait, answerWaitLong
	answerWait, answerWaitLong = d, long
	return func() { answerWait, answerWaitLong = old, oldLong }
}
