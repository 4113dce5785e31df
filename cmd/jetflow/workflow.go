package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"gopkg.in/yaml.v3"

	"github.com/jetflow/jetflow"
)

// cmdWorkflow: jetflow workflow submit FILE | get ID | retry ID
// (docs/workflows.md).
func cmdWorkflow(c *cli, args []string) int {
	sub, rest := subcommand(args)
	switch sub {
	case "submit":
		c.name = "workflow submit"
		return workflowSubmit(c, rest)
	case "get":
		c.name = "workflow get"
		return workflowGet(c, rest)
	case "retry":
		c.name = "workflow retry"
		return workflowRetry(c, rest)
	case "":
		if wantsHelp(args) {
			c.printHelp()
			c.helped = true
			return exitOK
		}
		c.errorf("want a subcommand: submit, get or retry (jetflow help workflow)")
		return exitUsage
	}
	c.unknownCommand(sub, "workflow")
	return exitUsage
}

// readWorkflowFile reads a workflow from a JSON or YAML file ("-":
// standard input): YAML is turned into the JSON format first.
func readWorkflowFile(path string) (*jetflow.Workflow, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = readAllLimited(os.Stdin, maxWorkflowFile)
	} else {
		var f *os.File
		if f, err = os.Open(path); err == nil {
			data, err = readAllLimited(f, maxWorkflowFile)
			f.Close()
		}
	}
	if err != nil {
		return nil, err
	}
	ext := strings.ToLower(filepath.Ext(path))
	if ext == ".yaml" || ext == ".yml" {
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("not YAML: %w", err)
		}
		if data, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("YAML that is not JSON data: %w", err)
		}
	}
	return jetflow.ParseWorkflow(data)
}

// maxWorkflowFile bounds a workflow's file (the engine takes 4 MiB).
const maxWorkflowFile = 4 << 20

func readAllLimited(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("more than %d bytes", limit)
	}
	return data, err
}

// workflowSubmit: jetflow workflow submit FILE [--key K] [--wait].
func workflowSubmit(c *cli, args []string) int {
	fs := c.clientFlags()
	var key string
	var wait bool
	fs.StringVar(&key, "key", "", "idempotency key of the workflow (a repeat returns the same workflow and steps); overrides the file's")
	fs.BoolVar(&wait, "wait", false, "wait until the workflow ended; exit 0 succeeded, 1 failed or cancelled")
	ns := c.namespaceFlag("the workflow's namespace (default: the file's, else default)")
	pos, ok := c.parse(args, 1, 1)
	if !ok || !c.checkNamespace(*ns) || !c.checkFlags(when("key", key == "", "must not be empty (leave --key out for the file's)")) {
		return exitUsage
	}
	wf, err := readWorkflowFile(pos[0])
	if err != nil {
		c.errorf("%s: %v", pos[0], err)
		return exitUsage
	}
	if c.given("key") {
		wf.IdempotencyKey = key
	}
	if *ns != "" {
		wf.Namespace = *ns
	}
	if err := wf.Validate(); err != nil {
		c.errorOf(err, "%s: %v", pos[0], err)
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		res, err := cl.SubmitWorkflow(ctx, wf)
		if err != nil {
			return c.fail(err)
		}
		if wait {
			done, err := cl.Wait(ctx, res.ID)
			if err != nil {
				return c.fail(err)
			}
			info, err := cl.GetWorkflow(ctx, done.ID)
			if err != nil {
				return c.fail(err)
			}
			c.printWorkflow(info)
			if info.State != jetflow.Succeeded {
				return exitFailed
			}
			return exitOK
		}
		if c.json {
			c.printJSON(res)
			return exitOK
		}
		verb := "created"
		if !res.Created {
			verb = "exists"
		}
		fmt.Fprintf(c.out, "%s\t%s\t%s, %d steps\n", res.ID, res.State, verb, len(res.Steps))
		return exitOK
	})
}

// workflowGet: jetflow workflow get ID: the graph as text, layer by
// layer, with each step's state.
func workflowGet(c *cli, args []string) int {
	c.clientFlags()
	pos, ok := c.parse(args, 1, 1)
	if !ok {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		info, err := cl.GetWorkflow(ctx, pos[0])
		if err != nil {
			return c.fail(err)
		}
		c.printWorkflow(info)
		return exitOK
	})
}

// workflowRetry: jetflow workflow retry ID.
func workflowRetry(c *cli, args []string) int {
	c.clientFlags()
	pos, ok := c.parse(args, 1, 1)
	if !ok {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		res, err := cl.RetryWorkflow(ctx, pos[0])
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			c.printJSON(res)
			return exitOK
		}
		fmt.Fprintf(c.out, "%s\t%s\t(resumes %s)\n", res.ID, res.State, pos[0])
		return exitOK
	})
}

// printWorkflow prints a workflow: JSON, or its steps by layer.
func (c *cli) printWorkflow(info *jetflow.WorkflowInfo) {
	if c.json {
		c.printJSON(info)
		return
	}
	name := info.Name
	if name == "" {
		name = "(no name)"
	}
	fmt.Fprintf(c.out, "workflow %s %s: %s\n", info.ID, name, info.State)
	if info.Error != nil {
		fmt.Fprintf(c.out, "  %s\n", info.Error.Message)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LAYER\tSTEP\tSTATUS\tJOB\tDEPENDS ON")
	for k, layer := range info.Layers {
		for _, n := range layer {
			s := info.Step(n)
			status := s.Status
			if s.Carried {
				status += " (carried)"
			}
			deps := strings.Join(s.DependsOn, ", ")
			if deps == "" {
				deps = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", k, s.Name, status, s.ID, deps)
		}
	}
	tw.Flush()
}
