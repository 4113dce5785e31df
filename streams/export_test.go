package streams

// maxMsgpackDepth for the external tests.
const MaxMsgpackDepth = maxMsgpackDepth
