package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/jetflow/jetflow"
)

// envNamespace is the namespace of the client commands when --namespace
// is not given.
const envNamespace = "JETFLOW_NAMESPACE"

// namespaceFlag adds --namespace, whose default is $JETFLOW_NAMESPACE.
func (c *cli) namespaceFlag(usage string) *string {
	ns := new(string)
	c.fs.StringVar(ns, "namespace", os.Getenv(envNamespace), usage+" (env "+envNamespace+")")
	return ns
}

// checkNamespace refuses a namespace that cannot be one, naming where it
// came from: the flag, or the environment. None at all ("" from neither)
// is fine: every namespace, or the default one.
func (c *cli) checkNamespace(ns string) bool {
	if !c.checkFlags(when("namespace", ns == "", "must not be empty (leave it out for every namespace)")) {
		return false
	}
	if ns == "" {
		return true
	}
	err := jetflow.CheckNamespace(ns)
	var in *jetflow.InputError
	if !errors.As(err, &in) {
		return err == nil
	}
	if c.given("namespace") {
		c.refuseFlag("namespace", in.Value, in.Reason)
	} else {
		c.errorf("$%s %s: %s", envNamespace, in.Value, in.Reason)
	}
	return false
}

// jobIn reads a job that must be of namespace ns ("": any). A job of
// another namespace is not found, as an unknown id is.
func (c *cli) jobIn(ctx context.Context, cl *jetflow.Client, id, ns string) (*jetflow.JobInfo, error) {
	job, err := cl.Get(ctx, id)
	if ns == "" {
		return job, err
	}
	if errors.Is(err, jetflow.ErrNotFound) || (err == nil && job.Namespace != ns) {
		return nil, fmt.Errorf("job %s in namespace %s: %w", id, ns, jetflow.ErrNotFound)
	}
	return job, err
}

// registrySlugs are the problem types of the type registry: the CLI names
// them, as they say more than the broader error they match.
var registrySlugs = []string{"invalid-namespace", "invalid-category", "invalid-type-name", "invalid-schema",
	"schema-violation", "schema-conflict", "unknown-type", "internal-type", "type-limit"}

// problem reports an error, with its problem type when it is one of the
// registry's, and a payload's schema violations one a line.
func (c *cli) problem(err error) {
	p := jetflow.ProblemOf(err)
	if !slices.Contains(registrySlugs, p.Type) {
		c.errorOf(err, "%v", err)
		return
	}
	if len(p.Violations) == 0 {
		c.errorOf(err, "%s: %v", p.Type, err)
		return
	}
	// The detail ends with the violations: they go one a line instead.
	parts := make([]string, len(p.Violations))
	for i, v := range p.Violations {
		parts[i] = v.Pointer + ": " + v.Message
	}
	c.errorOf(err, "%s: %s", p.Type, strings.TrimSuffix(err.Error(), ": "+strings.Join(parts, "; ")))
	if c.json {
		return // the violations are in the problem
	}
	for _, v := range p.Violations {
		fmt.Fprintf(c.errw, "  %s: %s\n", v.Pointer, v.Message)
	}
}

// typeRow is a type as `jetflow types --json` prints it: the type and the
// live workers that serve it.
type typeRow struct {
	*jetflow.TypeInfo
	LiveWorkers []string `json:"live_workers"`
}

// cmdTypes lists the registered types visible from a namespace (its own
// and @global; every type without one), with their live workers.
func cmdTypes(c *cli, args []string) int {
	fs := c.clientFlags()
	ns := c.namespaceFlag("only the types visible from this namespace: its own and @global")
	var deleted bool
	fs.BoolVar(&deleted, "deleted", false, "list soft-deleted types too")
	if _, ok := c.parse(args, 0, 0); !ok || !c.checkNamespace(*ns) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		types, err := cl.Types(ctx, *ns, deleted)
		if err != nil {
			return c.fail(err)
		}
		workers, err := cl.Workers(ctx)
		if err != nil {
			return c.fail(err)
		}
		rows := make([]typeRow, len(types))
		for i, t := range types {
			rows[i] = typeRow{TypeInfo: t, LiveWorkers: []string{}}
			for _, w := range workers {
				if w.Live && slices.Contains(w.Types, t.FullName) {
					rows[i].LiveWorkers = append(rows[i].LiveWorkers, w.ID)
				}
			}
		}
		if c.json {
			c.printJSON(rows)
			return exitOK
		}
		if len(rows) == 0 {
			if *ns != "" {
				fmt.Fprintf(c.errw, "no types are registered in namespace %s or @global\n", *ns)
			} else {
				fmt.Fprintln(c.errw, "no types are registered")
			}
			return exitOK
		}
		w := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "TYPE\tSTATUS\tLIVE WORKERS\tSCHEMA\tDESCRIPTION")
		for _, r := range rows {
			status, schema := "active", "any"
			if r.Deleted {
				status = "deleted"
			}
			if string(r.Schema) != "null" {
				schema = "yes"
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", r.FullName, status, len(r.LiveWorkers), schema, r.Description)
		}
		w.Flush()
		return exitOK
	})
}

// Outcomes of a registration.
const (
	registered  = "created"
	exists      = "exists"
	reactivated = "reactivated"
)

// cmdType registers a type (scope:category:name) with the JSON
// Schema of its payload: created, exists (the same schema, or none, again:
// nothing written) or reactivated (a soft-deleted type, its schema
// replaced). A schema that conflicts with the active type's (409) or is not
// a JSON Schema (422) is exit 1.
//
// It is `jetflow type register FULLNAME`: register is the only subcommand
// of type.
func cmdType(c *cli, args []string) int {
	if slices.Contains(args, "register") {
		c.name = "type register"
	}
	fs := c.clientFlags()
	var schemaFile, description string
	fs.StringVar(&schemaFile, "schema", "", "file holding the JSON Schema (draft 2020-12) of the payload (default: any payload)")
	fs.StringVar(&description, "description", "", "what the type does")
	pos, ok := c.parse(args, 0, -1)
	if !ok {
		return exitUsage
	}
	if len(pos) == 0 || pos[0] != "register" || len(pos) != 2 {
		c.errorf("want: jetflow type register FULLNAME [--schema FILE] [--description TEXT]; got: %s", strings.Join(append([]string{"type"}, pos...), " "))
		return exitUsage
	}
	if !c.checkFlags(when("schema", schemaFile == "", "must not be empty (leave it out for any payload)")) {
		return exitUsage
	}
	full := pos[1]
	if _, err := jetflow.ParseTypeName(full); err != nil {
		var in *jetflow.InputError
		switch {
		case !errors.As(err, &in):
			c.errorf("FULLNAME %q: %v", full, err)
		case in.Field == "type": // not three parts
			c.errorf("FULLNAME %q: %s", full, in.Reason)
		default: // the part refused; a scope is a namespace, @global or @internal
			part := in.Field
			if part == "namespace" {
				part = "scope"
			}
			c.errorf("FULLNAME %q: %s %s: %s", full, part, in.Value, in.Reason)
		}
		return exitUsage
	}
	var schema json.RawMessage
	if schemaFile != "" {
		b, err := os.ReadFile(schemaFile)
		if err != nil {
			c.refuseFlag("schema", schemaFile, err.Error())
			return exitUsage
		}
		schema = b
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		before, err := cl.Type(ctx, full)
		if err != nil && !errors.Is(err, jetflow.ErrNotFound) {
			return c.fail(err)
		}
		info, created, err := cl.RegisterType(ctx, full, schema, description)
		if err != nil {
			if c.flagInput(err, map[string]string{"description": "description"}) {
				return exitUsage
			}
			c.problem(err)
			switch jetflow.ProblemOf(err).Status {
			case 409, 422: // the schema conflicts, or is not one
				return exitFailed
			}
			if errors.Is(err, jetflow.ErrInvalidInput) || errors.Is(err, jetflow.ErrNotFound) {
				return exitUsage
			}
			return exitFailed
		}
		outcome := exists
		switch {
		case created:
			outcome = registered
		case before != nil && before.Deleted && !info.Deleted:
			outcome = reactivated
		}
		if c.json {
			c.printJSON(struct {
				*jetflow.TypeInfo
				Outcome string `json:"outcome"`
			}{info, outcome})
			return exitOK
		}
		fmt.Fprintf(c.out, "%s\t%s\n", info.FullName, outcome)
		return exitOK
	})
}
