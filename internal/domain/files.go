package domain

// FileRef is one of a job's files as its spec records it: the name in the
// job's directory (slash-separated, checked by commands.CheckFileName),
// its size and the object store's digest of it ("SHA-256=<base64url>").
type FileRef struct {
	Name   string `msgpack:"name" json:"name"`
	Size   int64  `msgpack:"size" json:"size"`
	Digest string `msgpack:"digest" json:"digest"`
}
