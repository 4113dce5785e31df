package projections

import "github.com/jetflow/jetflow/commands"

// Diff is one job whose projection differs from its log.
type Diff struct {
	ID     string   `json:"id"`
	Reason string   `json:"reason"`
	Fields []string `json:"fields,omitempty"`
}

// Report is the outcome of Verify.
type Report struct {
	Jobs    int    `json:"jobs"`     // jobs in the log
	Records int    `json:"records"`  // records in the bucket
	LastSeq uint64 `json:"last_seq"` // events up to here were rebuilt
	// Registry is how many types and namespaces were rebuilt from the log
	// and compared with their buckets.
	Registry int `json:"registry"`
	// Schedules is how many schedules were rebuilt from the log and
	// compared with their records.
	Schedules int `json:"schedules"`
	// Purged is how many jobs of the log were purged by retention (they
	// must have no record).
	Purged int `json:"purged"`
	// Slots are the slot counts of every queue with limits, from the log;
	// SlotsChecked says whether the live admitter's counts were compared.
	Slots        map[string]commands.Counts `json:"slots,omitempty"`
	SlotsChecked bool                       `json:"slots_checked"`
	// RateAdmissions is how many admissions of queues with a rate limit
	// were checked against it (no period over the limit).
	RateAdmissions int `json:"rate_admissions_checked"`
	// UniqueJobs is how many unique jobs were checked against the jobs of
	// their key before them (none held the key when it was created).
	UniqueJobs int    `json:"unique_jobs_checked"`
	Diffs      []Diff `json:"diffs"`
}
