// Package shell runs jobs as processes: `jetflow worker --exec
// TYPE=COMMAND` registers a Runner as the handler of TYPE.
//
// Each attempt gets a fresh private directory (mode 0700) under
// Config.WorkDir, removed when the attempt ends:
//
//	<work-dir>/<job id>-<attempt>-<random>/   the command's working directory
//	    payload.json      the job's payload
//	    inputs.json       a workflow step's: its dependencies' results by step name
//	    <input files>     placed by Config.Prepare (the job's files)
//	    out/              $JETFLOW_OUTPUT: what the job produces
//	    tmp/              $TMPDIR
//	    stdout.txt        the command's stdout, less the ::progress and ::event lines
//	    stderr.txt        the command's stderr
//
// The command runs as `bash -c COMMAND` in that directory, in a process
// group of its own, with the environment of the worker (less its JETFLOW_*
// variables) and JETFLOW_JOB_ID, JETFLOW_TYPE, JETFLOW_NAMESPACE,
// JETFLOW_QUEUE, JETFLOW_ATTEMPT, JETFLOW_PAYLOAD (when at most
// MaxEnvPayload bytes; payload.json always), JETFLOW_OUTPUT and TMPDIR; a
// workflow step's also JETFLOW_STEP (its name) and JETFLOW_INPUTS (the
// path of inputs.json).
//
// How it ends:
//
//   - exit 0: the job succeeds with a Result (exit code, duration, the tail
//     of stdout, the files in out/);
//   - exit ExitRetryLater (75, EX_TEMPFAIL): the job runs again later without
//     using up a retry; the last line of stdout is the delay, a Go duration
//     ("90s") or seconds ("90"), DefaultRetryLaterDelay if it is neither;
//   - another exit n (128+s for a signal s): the attempt fails with code
//     EXIT_<n> (for retry_on and no_retry_on) and the tail of stderr as its
//     message;
//   - more than Config.MaxOutput bytes written to the directory (logs
//     included): the process group is killed at once and the attempt fails
//     with code OUTPUT_TOO_LARGE.
//
// Lines on stdout drive the job:
//
//	::progress CURRENT/TOTAL [message]   the job's progress
//	::event NAME [message]               a named event in the job's log (job.event)
//
// When the attempt's context ends (cancel, timeout, lost lease, worker
// shutdown) and when the command exits leaving processes behind, the whole
// process group gets SIGTERM, then SIGKILL after Config.KillGrace. Work
// returns only once the group is empty: no process of a job outlives its
// attempt, except one that left the group on purpose (setsid). The group's
// leader is a small bash that runs the command and holds a watchdog: when
// the worker dies, even by SIGKILL, the watchdog kills the group. On Linux,
// New makes the worker a child subreaper (PR_SET_CHILD_SUBREAPER), so that
// the processes a command leaves behind become the worker's children: it
// reaps them, where PID 1 of a container might not.
//
// The files of the job plug in with Config.Prepare (inputs, before the run)
// and Config.Collect (outputs and logs, after it, whatever the outcome);
// the names above are taken.
package shell
