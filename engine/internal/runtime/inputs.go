package runtime

import (
	"context"
	"errors"
	"sync"
)

// inputs are a step's inputs, read once.
type inputs struct {
	mu   sync.Mutex
	read bool
	m    map[string][]byte
}

// Inputs are the results of the job's dependencies by step name when it is
// a step of a workflow (nil when it is not), read from their records at
// the first call.
func (t *Task) Inputs(ctx context.Context) (map[string][]byte, error) {
	if t.Job.Spec.Step == nil {
		return nil, nil
	}
	if t.run == nil {
		return nil, errors.New("inputs: not a running attempt")
	}
	t.inputs.mu.Lock()
	defer t.inputs.mu.Unlock()
	if !t.inputs.read {
		m, err := t.run.rt.store.StepInputs(ctx, t.Job, -1)
		if err != nil {
			return nil, err
		}
		t.inputs.m, t.inputs.read = m, true
	}
	return t.inputs.m, nil
}
