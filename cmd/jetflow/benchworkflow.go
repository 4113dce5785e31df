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
	// Wide only: the same number of plain jobs of the same handler, on
	// the same worker, engine and server, just after the workflow (each
	// run settled first), both counted end to end: from the submit's
	// start to the last handler's end, and CPU (server and engine) from
	// the submit to the moment the engine's log consumers caught up.
	EndToEndStepsPerSec float64         `json:"end_to_end_steps_per_sec,omitempty"`
	CPUSettledPerStepUs float64         `json:"cpu_settled_per_step_us,omitempty"`
	Plain               *plainBenchLeg  `json:"plain,omitempty"`
	Ratio               *workflowVsJobs `json:"ratio,omitempty"`
}

// plainBenchLeg is bench --workflow wide's run of plain jobs.
type plainBenchLeg struct {
	Jobs            int     `json:"jobs"`
	EndToEndPerSec  float64 `json:"end_to_end_jobs_per_sec"` // submit start -> last handler end
	DrainPerSec     float64 `json:"jobs_per_sec"`            // first handler start -> last handler end
	CPUSettledPerUs float64 `json:"cpu_settled_per_job_us"`  // submit -> caught up
}

// workflowVsJobs are the wide graph's figures over the plain jobs'.
type workflowVsJobs struct {
	EndToEnd float64 `json:"end_to_end"`  // steps/s over jobs/s, end to end
	Drain    float64 `json:"drain"`       // steps/s over jobs/s, first start -> last end
	CPU      float64 `json:"cpu_per_one"` // CPU per step over CPU per job (settled)
}

// benchWorkflow runs one workflow of n steps: a chain (each step after the
// one before: the time from a step's end to the next one's start), or a
// wide graph in layers (each step after two of the layer before: steps/s,
// to compare with plain jobs/s at the same --workers).
func benchWorkflow(c *cli, ctx context.Context, eng *jetflow.Engine, subCl, workCl *jetflow.Client, queue, shape string, n, layers, workers int, storage, cpuprofile string) int {
	const stepType = "bench.step"
	type span struct{ start, end time.Time }
	var mu sync.Mutex
	spans := make(map[string]*span, n)
	var plain plainSpans // the plain jobs' (wide), which have no step name
	w := jetflow.NewWorker(workCl, jetflow.WorkerConfig{ID: "bench-worker", Logger: c.logger(),
		Queues: map[string]jetflow.QueueConfig{queue: {Concurrency: workers}}})
	jetflow.Register(w, stepType, func(ctx context.Context, job *jetflow.Job[json.RawMessage]) (json.RawMessage, error) {
		now := time.Now()
		if job.Step() == "" {
			plain.ran(now)
			return nil, nil
		}
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
	stopProfile := func() {}
	if cpuprofile != "" {
		if f, err := os.Create(cpuprofile); err == nil && pprof.StartCPUProfile(f) == nil {
			stopProfile = sync.OnceFunc(func() { pprof.StopCPUProfile(); f.Close() })
			defer stopProfile()
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
	if shape == "wide" && done.State == jetflow.Succeeded && ran == n {
		if d := last.Sub(t0).Seconds(); d > 0 {
			out.EndToEndStepsPerSec = float64(n) / d
		}
		if err := eng.CaughtUp(ctx); err != nil {
			c.errorf("settle after the workflow: %v", err)
			return exitFailed
		}
		out.CPUSettledPerStepUs = float64((cpuTime() - cpu0).Microseconds()) / float64(n)
		stopProfile() // the workflow's run only
		leg, err := benchPlainLeg(c, ctx, eng, subCl, queue, stepType, n, &plain)
		if err != nil {
			c.errorf("plain jobs after the workflow: %v", err)
			return exitFailed
		}
		out.Plain = leg
		out.Ratio = &workflowVsJobs{EndToEnd: out.EndToEndStepsPerSec / leg.EndToEndPerSec,
			Drain: out.StepsPerSec / leg.DrainPerSec, CPU: out.CPUSettledPerStepUs / leg.CPUSettledPerUs}
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
		if p := out.Plain; p != nil {
			fmt.Fprintf(c.out, "  against %d plain jobs of the same handler, just after (each settled first):\n", p.Jobs)
			fmt.Fprintf(c.out, "    end to end              %8.0f steps/s, %8.0f jobs/s: %.2fx (submit start -> last handler end)\n", out.EndToEndStepsPerSec, p.EndToEndPerSec, out.Ratio.EndToEnd)
			fmt.Fprintf(c.out, "    drain                   %8.0f steps/s, %8.0f jobs/s: %.2fx (first handler start -> last end)\n", out.StepsPerSec, p.DrainPerSec, out.Ratio.Drain)
			fmt.Fprintf(c.out, "    cpu                     %8.0f µs/step, %6.0f µs/job: %.2fx (submit -> the log's consumers caught up)\n", out.CPUSettledPerStepUs, p.CPUSettledPerUs, out.Ratio.CPU)
		}
	}
	if done.State != jetflow.Succeeded || ran != n {
		return exitFailed
	}
	return exitOK
}

// plainSpans are the handler starts of bench --workflow wide's plain jobs.
type plainSpans struct {
	mu          sync.Mutex
	n, want     int
	first, last time.Time
	done        chan struct{}
}

func (p *plainSpans) ran(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		p.first = at
	}
	p.n++
	p.last = at
	if p.n == p.want && p.done != nil {
		close(p.done)
	}
}

// benchPlainLeg submits n plain jobs of jobType to queue as the plain bench
// does (submitInBatches, batches of 1,000), waits
// until the worker ran them all and the engine's log consumers caught
// up, and measures them as the wide workflow is measured.
func benchPlainLeg(c *cli, ctx context.Context, eng *jetflow.Engine, subCl *jetflow.Client, queue, jobType string, n int, spans *plainSpans) (*plainBenchLeg, error) {
	spans.mu.Lock()
	spans.want, spans.done = n, make(chan struct{})
	spans.mu.Unlock()
	fmt.Fprintf(c.errw, "plain: %d jobs of the same handler...\n", n)
	cpu0, t0 := cpuTime(), time.Now()
	err := submitInBatches(ctx, subCl, n, 1000, func() *jetflow.SubmitRequest {
		return &jetflow.SubmitRequest{Type: jobType, Queue: queue, MaxRetries: new(int)}
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-spans.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := eng.CaughtUp(ctx); err != nil {
		return nil, err
	}
	cpu := cpuTime() - cpu0
	spans.mu.Lock()
	defer spans.mu.Unlock()
	leg := &plainBenchLeg{Jobs: n, CPUSettledPerUs: float64(cpu.Microseconds()) / float64(n)}
	if d := spans.last.Sub(t0).Seconds(); d > 0 {
		leg.EndToEndPerSec = float64(n) / d
	}
	if d := spans.last.Sub(spans.first).Seconds(); d > 0 {
		leg.DrainPerSec = float64(n) / d
	}
	return leg, nil
}
