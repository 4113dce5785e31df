package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/jetflow/jetflow"
)

// workflowShapes are the graphs of bench --workflow.
var workflowShapes = []string{"chain", "wide"}

type workflowBenchResult struct {
	Shape         string  `json:"shape"`
	Steps         int     `json:"steps"`
	Layers        int     `json:"layers"`
	Workers       int     `json:"workers"`
	Storage       string  `json:"storage"`
	SubmitMs      float64 `json:"submit_ms"`      // the workflow's submit: its event and every step written
	HandoffP50Ms  float64 `json:"handoff_p50_ms"` // a step's handler returned -> the next step's handler started (chain)
	HandoffP99Ms  float64 `json:"handoff_p99_ms"`
	StepsPerSec   float64 `json:"steps_per_sec"` // first step started -> last step ended
	TotalSeconds  float64 `json:"total_seconds"` // submitted -> the workflow ended
	State         string  `json:"state"`
	CPUCores      float64 `json:"cpu_cores"`
	CPUPerStepUs  float64 `json:"cpu_per_step_us"` // server and engine, submit to end, per step
	WritesPerStep float64 `json:"writes_per_step"` // messages stored in every stream, per step (-1: not counted)
}

// benchWorkflow runs one workflow of n steps: a chain (each step after the
// one before: the time from a step's end to the next one's start), or a
// wide graph in layers (each step after two of the layer before: steps/s,
// to compare with plain jobs/s at the same --workers).
func benchWorkflow(c *cli, ctx context.Context, subCl, workCl *jetflow.Client, queue, shape string, n, layers, workers int, storage, cpuprofile string) int {
	const stepType = "bench.step"
	type span struct{ start, end time.Time }
	var mu sync.Mutex
	spans := make(map[string]*span, n)
	w := jetflow.NewWorker(workCl, jetflow.WorkerConfig{ID: "bench-worker", Logger: c.logger(),
		Queues: map[string]jetflow.QueueConfig{queue: {Concurrency: workers}}})
	jetflow.Register(w, stepType, func(ctx context.Context, job *jetflow.Job[json.RawMessage]) (json.RawMessage, error) {
		now := time.Now()
		mu.Lock()
		spans[job.Step()] = &span{start: now, end: now}
		mu.Unlock()
		return nil, nil
	}, jetflow.OnQueue(queue))
	if err := w.Start(ctx); err != nil {
		c.errorOf(err, "%v", err)
		return exitFailed
	}
	defer w.Stop(context.Background())

	wf := jetflow.NewWorkflow("bench-" + shape)
	wf.Queue = queue
	name := func(i int) string { return fmt.Sprintf("s%d", i) }
	steps := make([]*jetflow.Step, n)
	per := (n + layers - 1) / layers
	for i := range steps {
		steps[i] = wf.Step(name(i), stepType, nil, jetflow.MaxRetries(0))
		switch {
		case shape == "chain" && i > 0:
			steps[i].After(steps[i-1])
		case shape == "wide" && i >= per:
			// Two steps of the layer before: the same place and the next.
			layer0, k := (i/per-1)*per, i%per
			steps[i].After(steps[layer0+k])
			if k2 := (k + 1) % per; k2 != k {
				steps[i].After(steps[layer0+k2])
			}
		}
	}
	if cpuprofile != "" {
		if f, err := os.Create(cpuprofile); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	writes0 := streamWrites(ctx, subCl.Conn())
	cpu0, t0 := cpuTime(), time.Now()
	fmt.Fprintf(c.errw, "workflow: %s of %d steps, %d handlers...\n", shape, n, workers)
	res, err := subCl.SubmitWorkflow(ctx, wf)
	if err != nil {
		c.errorOf(err, "%v", err)
		return exitFailed
	}
	submitted := time.Since(t0)
	done, err := subCl.Wait(ctx, res.ID)
	if err != nil {
		c.errorf("wait for the workflow: %v", err)
		return exitFailed
	}
	end := time.Now()
	cpu := cpuTime() - cpu0
	writes := -1.0
	if writes0 >= 0 {
		if w1 := streamWrites(ctx, subCl.Conn()); w1 >= 0 {
			writes = float64(w1-writes0) / float64(n)
		}
	}
	out := workflowBenchResult{Shape: shape, Steps: n, Layers: layers, Workers: workers, Storage: storage,
		SubmitMs: float64(submitted) / 1e6, TotalSeconds: end.Sub(t0).Seconds(), State: string(done.State),
		CPUCores: cpu.Seconds() / end.Sub(t0).Seconds(), CPUPerStepUs: float64(cpu.Microseconds()) / float64(n),
		WritesPerStep: writes}
	if shape == "chain" {
		out.Layers = n
	}
	mu.Lock()
	var first, last time.Time
	for _, s := range spans {
		if first.IsZero() || s.start.Before(first) {
			first = s.start
		}
		if s.end.After(last) {
			last = s.end
		}
	}
	if shape == "chain" {
		var hand []time.Duration
		for i := 1; i < n; i++ {
			a, b := spans[name(i-1)], spans[name(i)]
			if a != nil && b != nil {
				hand = append(hand, b.start.Sub(a.end))
			}
		}
		out.HandoffP50Ms, out.HandoffP99Ms = pct(hand)
	}
	ran := len(spans)
	mu.Unlock()
	if d := last.Sub(first).Seconds(); d > 0 {
		out.StepsPerSec = float64(ran) / d
	}
	if c.json {
		c.printJSON(out)
	} else {
		fmt.Fprintf(c.out, "jetflow bench --workflow %s: %d steps in %d layers, %d handlers, %s\n", shape, n, out.Layers, workers, storage)
		fmt.Fprintf(c.out, "  submit                    %8.1f ms (the workflow and its steps written)\n", out.SubmitMs)
		if shape == "chain" {
			fmt.Fprintf(c.out, "  step end -> next start    p50 %.2f ms  p99 %.2f ms\n", out.HandoffP50Ms, out.HandoffP99Ms)
		}
		fmt.Fprintf(c.out, "  steps                     %8.0f steps/s (first step started -> last ended)\n", out.StepsPerSec)
		fmt.Fprintf(c.out, "  workflow                  %s after %.2f s, cpu %.2f cores\n", out.State, out.TotalSeconds, out.CPUCores)
		fmt.Fprintf(c.out, "  cpu                       %8.0f µs per step (server and engine, submit to end)\n", out.CPUPerStepUs)
		if writes >= 0 {
			fmt.Fprintf(c.out, "  writes                    %8.1f per step (messages stored in every stream)\n", out.WritesPerStep)
		}
	}
	if done.State != jetflow.Succeeded || ran != n {
		return exitFailed
	}
	return exitOK
}
