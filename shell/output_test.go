package shell

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRetryDelay(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "1m30s": 90 * time.Second, "1.5": 1500 * time.Millisecond, "0": 0, "0s": 0,
		"": DefaultRetryLaterDelay, "soon": DefaultRetryLaterDelay, "-5s": DefaultRetryLaterDelay,
		"-1": DefaultRetryLaterDelay, "NaN": DefaultRetryLaterDelay, "1e300": DefaultRetryLaterDelay,
	} {
		if got := retryDelay([]byte(in)); got != want {
			t.Errorf("retryDelay(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestTail(t *testing.T) {
	for _, in := range []string{"", "short", strings.Repeat("é", 3000), "\xff" + strings.Repeat("x", 10), strings.Repeat("x", 5000) + "\xff"} {
		got := tail([]byte(in))
		if len(got) > TailBytes+2 || !utf8.ValidString(got) || (len(in) <= TailBytes && !utf8.ValidString(in) == (got == in)) {
			t.Errorf("tail of %d bytes: %d bytes, valid %v", len(in), len(got), utf8.ValidString(got))
		}
	}
}
