package store

import (
	"errors"
	"testing"
)

// A claim's read-back on a cluster stands only once it is read as far as
// the stream's leader has the job: a read behind it (the claim may be in
// the log) is read again, found or not; a job the leader has no event of
// is gone; else the read stands.
func TestAgainstLeader(t *testing.T) {
	for _, tc := range []struct {
		name       string
		read, last uint64
		found      bool
		gone       bool
		behind     bool
	}{
		{"as far as the leader", 7, 7, true, false, false},
		{"the leader asked after the read, nothing new", 9, 7, true, false, false},
		{"behind the leader: the claim may be there", 6, 7, true, false, true},
		{"not found on a replica the leader has it on", 0, 7, false, false, true},
		{"not found, nor on the leader", 0, 0, false, false, false},
		{"found, the leader has no event of it: purged", 7, 0, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone, err := againstLeader(tc.read, tc.last, tc.found)
			if gone != tc.gone || errors.Is(err, errBehindLeader) != tc.behind || (err != nil) != tc.behind {
				t.Fatalf("againstLeader(%d, %d, %v) = %v, %v; want gone %v, behind %v", tc.read, tc.last, tc.found, gone, err, tc.gone, tc.behind)
			}
		})
	}
}
