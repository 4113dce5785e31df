package testkit

import "math/rand/v2"

// WorkflowModel is a random workflow and what a model of the workflow
// rules says of it: each step's dependencies (earlier steps only: a DAG),
// its policy (skip or always: a failure under "fail" ends the workflow at
// once, and what its running siblings then do is a matter of timing), and
// whether its handler fails.
type WorkflowModel struct {
	Deps   [][]int
	Always []bool
	Fails  []bool
}

// RandomWorkflow draws a graph of 1 to 12 steps.
func RandomWorkflow(r *rand.Rand) WorkflowModel {
	n := 1 + r.IntN(12)
	g := WorkflowModel{Deps: make([][]int, n), Always: make([]bool, n), Fails: make([]bool, n)}
	for i := range n {
		for d := range i {
			if r.IntN(4) == 0 {
				g.Deps[i] = append(g.Deps[i], d)
			}
		}
		g.Always[i] = r.IntN(5) == 0
		g.Fails[i] = r.IntN(6) == 0
	}
	return g
}

// Outcome says, for each step, whether it runs and how it ends
// (succeeded, failed, skipped), and whether the workflow succeeds: a step
// under skip runs once every dependency succeeded and is skipped as soon
// as one did not; a step under always runs once they all ended, however;
// the workflow succeeds if every step did.
func (g WorkflowModel) Outcome() (status []string, ok bool) {
	status = make([]string, len(g.Deps))
	ok = true
	for i, deps := range g.Deps {
		runs := true
		if !g.Always[i] {
			for _, d := range deps {
				if status[d] != "succeeded" {
					runs = false
				}
			}
		}
		switch {
		case !runs:
			status[i] = "skipped"
		case g.Fails[i]:
			status[i] = "failed"
		default:
			status[i] = "succeeded"
		}
		ok = ok && status[i] == "succeeded"
	}
	return status, ok
}
