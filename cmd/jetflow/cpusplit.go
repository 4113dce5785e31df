package main

import (
	"bytes"
	"io"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// cpuSplit is where a bench's CPU went, from a CPU profile of it: the
// embedded NATS server's code, the rest of the process's code (the engine,
// the workers, the submitters and their NATS clients), and the Go runtime
// alone (garbage collection, the scheduler: samples with no other frame).
type cpuSplit struct {
	Server, Engine, Runtime time.Duration
}

// cpuRecorder profiles the process's CPU into a buffer, and into a file's
// writer too when one is given (--cpuprofile).
type cpuRecorder struct {
	buf bytes.Buffer
	on  bool
}

func startCPURecorder(file io.Writer) *cpuRecorder {
	r := &cpuRecorder{}
	var w io.Writer = &r.buf
	if file != nil {
		w = io.MultiWriter(&r.buf, file)
	}
	r.on = pprof.StartCPUProfile(w) == nil // another profile runs: no split
	return r
}

// stop ends the profile and splits it; ok false if there was none (r nil:
// none was asked for).
func (r *cpuRecorder) stop() (cpuSplit, bool) {
	if r == nil || !r.on {
		return cpuSplit{}, false
	}
	pprof.StopCPUProfile()
	r.on = false
	p, err := profile.Parse(&r.buf)
	if err != nil {
		return cpuSplit{}, false
	}
	return splitCPU(p), true
}

// splitCPU sums a CPU profile's samples by splitPart.
func splitCPU(p *profile.Profile) cpuSplit {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	var s cpuSplit
	if idx < 0 {
		return s
	}
	for _, smp := range p.Sample {
		d := time.Duration(smp.Value[idx])
		switch splitPart(smp) {
		case "server":
			s.Server += d
		case "engine":
			s.Engine += d
		default:
			s.Runtime += d
		}
	}
	return s
}

// splitPart tells whose a sample is: the server's if any frame is in
// nats-server, the engine's if any frame is outside the Go runtime, else
// the runtime's.
func splitPart(smp *profile.Sample) string {
	part := "runtime"
	for _, loc := range smp.Location {
		for _, ln := range loc.Line {
			if ln.Function == nil {
				continue
			}
			name := ln.Function.Name
			switch {
			case strings.HasPrefix(name, "github.com/nats-io/nats-server/"):
				return "server"
			case !runtimeFrame(name):
				part = "engine"
			}
		}
	}
	return part
}

// runtimeFrame: the Go runtime's own functions (memmove, the write
// barrier and the map hash are runtime.* too).
func runtimeFrame(name string) bool {
	return strings.HasPrefix(name, "runtime.") || strings.HasPrefix(name, "runtime/") || strings.HasPrefix(name, "internal/runtime/")
}
