package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
)

// cmdAudit: audit verify (the event log's chain and checkpoints), audit
// pubkey (the public half of the checkpoint key).
func cmdAudit(c *cli, args []string) int {
	sub := ""
	for _, a := range args {
		if slices.Contains([]string{"verify", "pubkey"}, a) {
			sub = a
			break
		}
	}
	if sub != "" {
		c.name = "audit " + sub
	}
	if sub == "pubkey" {
		return c.auditPubkey(args)
	}
	fs := c.clientFlags()
	var scope engine.AuditScope
	var pub, file string
	fs.StringVar(&scope.Namespace, "namespace", "", "only the events of this namespace's jobs")
	fs.StringVar(&scope.Queue, "queue", "", "only the events of this queue's jobs")
	fs.StringVar(&scope.Type, "type", "", "only the events of jobs of this type")
	fs.StringVar(&scope.Job, "job", "", "only the events of this job (and its pieces)")
	var since, until string
	fs.StringVar(&since, "since", "", "only the events stored from this instant: RFC 3339 (2026-11-26T14:00:00Z) or a date (UTC); a chain may start before it, and a checkpoint whose range does has only its signature checked")
	fs.StringVar(&until, "until", "", "only the events stored up to this instant (RFC 3339 or a date); the events after the last checkpoint read are uncovered")
	fs.StringVar(&file, "file", "", "verify this export (jetflow export) offline, against --pubkey, instead of the log")
	fs.StringVar(&pub, "pubkey", "", "the public key(s) the checkpoints must be signed with, comma-separated (jetflow audit pubkey of each engine, kept apart from the system); default: the key they name, which proves less")
	pos, ok := c.parse(args, 1, 1)
	if !ok {
		return exitUsage
	}
	if pos[0] != "verify" {
		c.errorf("want verify or pubkey, got %q", pos[0])
		return exitUsage
	}
	from, okSince := exportTime(since)
	to, okUntil := exportTime(until)
	if !c.checkFlags(
		when("since", !okSince, "want RFC 3339 (2026-11-26T14:00:00Z) or a date (2026-11-26)"),
		when("until", !okUntil, "want RFC 3339 (2026-11-26T14:00:00Z) or a date (2026-11-26)"),
		when("until", okSince && okUntil && !from.IsZero() && !to.IsZero() && to.Before(from), "before --since"),
		when("file", file != "" && (since != "" || until != ""), "not with --since or --until (an export is verified whole)"),
		when("namespace", !domain.ValidNamespace(scope.Namespace), "not a namespace name"),
		when("queue", !domain.ValidQueue(scope.Queue), "not a queue name"),
		when("type", scope.Type == "" || len(scope.Type) > 256 || strings.ContainsAny(scope.Type, " *>"), "not a job type"),
		when("job", !domain.ValidID(scope.Job), "not a job id"),
		when("pubkey", !validPubkeys(pub), "not checkpoint public keys, comma-separated (jetflow audit pubkey prints one)"),
		when("file", file == "", "must not be empty"),
		when("file", scope != engine.AuditScope{}, "not with --namespace, --queue, --type or --job (an export is verified whole)"),
	) {
		return exitUsage
	}
	// A verification keeps about 150 bytes a subject and allocates much
	// more: the same collector settings as a fold (10M events of 3.3M
	// jobs in < 1 GiB RSS, docs/audit.md).
	tuneForFold()
	if file != "" {
		if pub == "" {
			c.errorf("--file: needs --pubkey (an export is checked against the key kept apart from the system)")
			return exitUsage
		}
		f, err := os.Open(file)
		if err != nil {
			c.errorf("--file %s: %v", file, err)
			return exitUsage
		}
		defer f.Close()
		rep, err := engine.VerifyAuditExport(f, pub)
		if err != nil {
			c.errorf("--file %s: %v", file, err)
			return exitFailed
		}
		return c.auditReport(rep)
	}
	// Through the client: with a token, the engine verifies (the token's
	// namespace only); without, this process reads the log.
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		r, err := cl.AuditVerify(ctx, jetflow.ReplayScope{Job: scope.Job, Namespace: scope.Namespace, Queue: scope.Queue,
			Type: scope.Type, Since: from, Until: to}, pub)
		if err != nil {
			return c.fail(err)
		}
		rep := &engine.AuditReport{Events: r.Events, Subjects: r.Subjects, Checkpoints: r.Checkpoints, Covered: r.Covered,
			Uncovered: r.Uncovered, Key: r.Key, KeyPinned: r.KeyPinned}
		for _, f := range r.Findings {
			rep.Findings = append(rep.Findings, engine.AuditFinding{Kind: f.Kind, Subject: f.Subject, Job: f.Job, Seq: f.Seq, What: f.What})
		}
		if r.FindingsNotShown > 0 {
			fmt.Fprintf(c.errw, "jetflow audit verify: %d more findings than the engine's reply holds are not shown\n", r.FindingsNotShown)
			if len(rep.Findings) == 0 {
				return exitFailed
			}
		}
		return c.auditReport(rep)
	})
}

// validPubkeys reports whether s is checkpoint public keys, comma-separated.
func validPubkeys(s string) bool {
	keys := strings.Split(s, ",")
	if len(keys) > 64 {
		return false
	}
	for _, k := range keys {
		if !nkeys.IsValidPublicServerKey(k) {
			return false
		}
	}
	return true
}

// auditReport prints a verification's report; exit 1 on a finding.
func (c *cli) auditReport(rep *engine.AuditReport) int {
	if c.json {
		if rep.Findings == nil {
			rep.Findings = []engine.AuditFinding{}
		}
		c.printJSON(rep)
	} else {
		fmt.Fprintf(c.out, "verified %d events on %d subjects, %d checkpoints: %d findings\n", rep.Events, rep.Subjects, rep.Checkpoints, len(rep.Findings))
		switch {
		case rep.Checkpoints == 0:
			fmt.Fprintf(c.out, "  no checkpoint: the chain alone proves nothing against whoever can write the log (docs/audit.md)\n")
		case rep.KeyPinned:
			fmt.Fprintf(c.out, "  checkpoints signed by %s, covering events up to %d; %d events after it not yet covered\n", rep.Key, rep.Covered, rep.Uncovered)
		default:
			fmt.Fprintf(c.out, "  checkpoints signed by %s (the key they name: give --pubkey to check it is yours), covering events up to %d; %d events after it not yet covered\n", rep.Key, rep.Covered, rep.Uncovered)
		}
		for _, f := range rep.Findings {
			fmt.Fprintf(c.out, "  %s\n", f)
		}
	}
	if !rep.OK() {
		return exitFailed
	}
	return exitOK
}

// auditPubkey prints the public key of the checkpoint key in --data (or
// --audit-dir).
func (c *cli) auditPubkey(args []string) int {
	fs := c.flags()
	var dir string
	fs.StringVar(&dir, "data", "./jetflow-data", "serve's data directory (or its --audit-dir), where "+jetflow.AuditKeyFile+" is")
	fs.StringVar(&dir, "audit-dir", "./jetflow-data", "the same as --data")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	pos, ok := c.parse(args, 1, 1)
	if !ok {
		return exitUsage
	}
	_ = pos
	path := filepath.Join(dir, jetflow.AuditKeyFile)
	seed, err := os.ReadFile(path)
	if err != nil {
		c.errorf("--data %s: %v (serve creates the key at its first start)", dir, err)
		return exitUsage
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		c.errorf("%s: not a key: %v", path, err)
		return exitFailed
	}
	pubkey := engine.AuditPublicKey(kp)
	if c.json {
		c.printJSON(map[string]string{"pubkey": pubkey})
	} else {
		fmt.Fprintln(c.out, pubkey)
	}
	return exitOK
}
