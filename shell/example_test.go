package shell_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/jetflowtest"
	"github.com/jetflow/jetflow/shell"
)

// A job type run by a shell command: its payload is in payload.json, what
// it leaves in $JETFLOW_OUTPUT is listed in the result.
func Example() {
	env, err := jetflowtest.Open(jetflowtest.Options{})
	if err != nil {
		panic(err)
	}
	defer env.Close()
	r, err := shell.New(shell.Config{Command: `echo "hello $(cat payload.json)" > "$JETFLOW_OUTPUT/greeting.txt"`})
	if err != nil {
		panic(err)
	}
	defer r.Close(context.Background())
	env.Worker.Handle("greet.sh", r)
	_ = env.Start()
	job, _ := env.Client.Submit(context.Background(), "greet.sh", "Ada")
	done, _ := env.Wait(job.ID, 10*time.Second)
	var res shell.Result
	_ = json.Unmarshal(done.Result, &res)
	fmt.Println(done.State, res.ExitCode, res.Outputs, res.OutputBytes)
	// Output: succeeded 0 [greeting.txt] 12
}
