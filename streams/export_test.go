package streams

import "time"

// maxMsgpackDepth for the external tests.
const MaxMsgpackDepth = maxMsgpackDepth

// SetAnswerWait sets answerWait for a test and returns what restores it.
func SetAnswerWait(d time.Duration) (restore func()) {
	old := answerWait
	answerWait = d
	return func() { answerWait = old }
}
