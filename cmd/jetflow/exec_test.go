package main

import (
	"strings"
	"testing"
)

// A bad --exec or shell-job flag is refused with exit 2, naming the flag,
// before anything is connected to.
func TestWorkerRefusesBadExecFlags(t *testing.T) {
	t.Parallel()
	worker := func(args ...string) []string {
		return append([]string{"worker", "--nats", "nats://127.0.0.1:1"}, args...)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{worker("--exec", "build"), `jetflow worker: --exec "build": want TYPE=COMMAND (TYPE= runs bash run.sh)`},
		{worker("--exec", "=make"), `--exec "=make": the type must not be empty`},
		{worker("--exec", "a b=make"), `--exec "a b=make": the type must not contain spaces`},
		{worker("--exec", "a\tb=make"), `the type must not contain spaces or control characters`},
		{worker("--exec", "a=x", "--exec", "a=y"), `--exec "a=y": the type is given twice`},
		{worker("--max-output", "0"), "jetflow worker: --max-output 0: must be more than 0"},
		{worker("--max-output", "-1MiB"), "--max-output -1048576: must be more than 0"},
		{worker("--max-output", "64XB"), `jetflow worker: --max-output 64XB: want a number of bytes, e.g. 67108864 or 64MiB`},
		{worker("--max-output", "1e3"), `--max-output 1e3: want a number of bytes`},
		{worker("--kill-grace", "0s"), "jetflow worker: --kill-grace 0s: must be more than 0"},
		{worker("--kill-grace", "-1s"), "jetflow worker: --kill-grace -1s: must not be negative"},
		{worker("--work-dir", ""), `--work-dir "": must not be empty`},
	} {
		stderr, code := runBounded(t, tc.args)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "64MiB": 64 << 20, "64mib": 64 << 20, "64MB": 64 << 20,
		"2K": 2 << 10, "1GiB": 1 << 30, "1TiB": 1 << 40, "-1KiB": -1024, "3B": 3} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("%q: %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "1.5MiB", "1PiB", "9999999999TiB", "1 MiB", "x"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("%q: accepted as %d", in, b)
		}
	}
}
