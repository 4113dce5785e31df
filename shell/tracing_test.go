package shell_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/shell"
)

// The command of a job submitted in a trace context has it in TRACEPARENT
// and TRACESTATE (here, with tracing off, the job's own context; with
// tracing on, its attempt's span: tests/tracing); a job outside any trace
// has neither, whatever the worker's environment says.
func TestTraceParentInTheEnvironment(t *testing.T) {
	t.Parallel()
	env, _ := setup(t, "sh.trace", `printf '%s|%s' "${TRACEPARENT-unset}" "${TRACESTATE-unset}"`,
		shell.Config{Env: []string{"PATH=" + os.Getenv("PATH"), "TRACEPARENT=00-11111111111111111111111111111111-2222222222222222-01", "TRACESTATE=w=1"}})
	tail := func(id string) string {
		t.Helper()
		var res shell.Result
		if err := json.Unmarshal(wait(t, env, id).Result, &res); err != nil {
			t.Fatal(err)
		}
		return res.StdoutTail
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	sc := tracing.Parse(tp, "rojo=00f067aa0ba902b7")
	j, err := env.Client.Submit(trace.ContextWithRemoteSpanContext(context.Background(), sc), "sh.trace", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := tail(j.ID); got != tp+"|rojo=00f067aa0ba902b7" {
		t.Errorf("traced job's command saw %q", got)
	}
	if got := tail(submit(t, env, "sh.trace", nil).ID); got != "unset|unset" {
		t.Errorf("a job outside any trace saw %q", got)
	}
}
