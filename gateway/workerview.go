package gateway

import (
	"fmt"
	"slices"
	"strings"
)

// concurrencyText says how many handlers a worker runs at once: a Go
// worker runs one runtime per queue, each with its own concurrency, so
// "--concurrency 40" on three queues is "40 on each of 3 queues", not 120;
// an HTTP worker's is what it registered. app.js's concurrencyText is the
// same rule.
func concurrencyText(w *WorkerView) string {
	qc := w.QueueConcurrency
	switch len(qc) {
	case 0:
		return fmt.Sprint(w.Concurrency)
	case 1:
		for _, n := range qc {
			return fmt.Sprint(n)
		}
	}
	names := make([]string, 0, len(qc))
	same := true
	for q, n := range qc {
		names = append(names, q)
		for _, m := range qc {
			same = same && m == n
		}
	}
	if same {
		return fmt.Sprintf("%d on each of %d queues", qc[names[0]], len(qc))
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, q := range names {
		parts[i] = fmt.Sprintf("%s: %d", q, qc[q])
	}
	return strings.Join(parts, ", ")
}
