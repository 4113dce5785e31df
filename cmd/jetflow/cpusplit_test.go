package main

import (
	"testing"

	"github.com/google/pprof/profile"
)

// A sample is the server's if any frame is in nats-server, the engine's
// if any other frame is outside the Go runtime, else the runtime's.
func TestSplitCPU(t *testing.T) {
	fn := func(name string) *profile.Location {
		return &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: name}}}}
	}
	sample := func(ns int64, frames ...string) *profile.Sample {
		s := &profile.Sample{Value: []int64{1, ns}}
		for _, f := range frames {
			s.Location = append(s.Location, fn(f))
		}
		return s
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			sample(10, "runtime.memmove", "github.com/nats-io/nats-server/v2/server.(*client).parse", "runtime.goexit"),
			sample(20, "runtime.mallocgc", "github.com/jetflow/jetflow/engine/internal/store.(*Store).Apply", "runtime.goexit"),
			sample(40, "github.com/nats-io/nats.go.(*Conn).readLoop", "runtime.goexit"),
			sample(80, "runtime.scanobject", "runtime.gcBgMarkWorker", "runtime.goexit"),
		},
	}
	got := splitCPU(p)
	if want := (cpuSplit{Server: 10, Engine: 60, Runtime: 80}); got != want {
		t.Fatalf("split %+v, want %+v", got, want)
	}
	if splitCPU(&profile.Profile{}) != (cpuSplit{}) {
		t.Fatal("a profile without cpu samples splits into something")
	}
}
