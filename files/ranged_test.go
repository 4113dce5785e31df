package files

import (
	"errors"
	"testing"
)

// FuzzReadCursor: a cursor of a read by offset decodes into what encodes
// to it again, or is refused with ErrBadCursor; an upload's handle is
// told apart from anything else.
func FuzzReadCursor(f *testing.F) {
	f.Add(at{nuid: "NUID1", seq: 7, start: 131072}.encode())
	f.Add("")
	f.Add("bm9wZQ")
	f.Add("up-AAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := decodeAt(s)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("%q: %v", s, err)
			}
		} else if b, err := decodeAt(a.encode()); err != nil || b != a {
			t.Fatalf("%q: %+v, again %+v %v", s, a, b, err)
		}
		if ValidUpload(s) && (len(s) != len(uploadPrefix)+uploadSecretLen || s[:3] != uploadPrefix) {
			t.Fatalf("%q taken for an upload", s)
		}
	})
}

func TestUploadHandles(t *testing.T) {
	h, err := NewUpload()
	if err != nil || !ValidUpload(h) {
		t.Fatalf("%q %v", h, err)
	}
	for _, bad := range []string{"", "up-", "up-AAAAAAAAAAAAAAAAAAAAA", "up-AAAAAAAAAAAAAAAAAAAAA/", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "UP-AAAAAAAAAAAAAAAAAAAAAA"} {
		if ValidUpload(bad) {
			t.Errorf("%q taken for an upload", bad)
		}
	}
}
