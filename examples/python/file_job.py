#!/usr/bin/env python3
"""A job-orchestrator-style file job: the user uploads a directory with a
run.sh and its inputs; a worker runs run.sh in a private copy of them, with
$JETFLOW_OUTPUT for what it produces; the result archive (out/..., stdout.txt,
stderr.txt) is stored with the job, whether run.sh succeeded or not, and the
user downloads it as a zip.

    python -m jetflow worker file_job:worker --url http://127.0.0.1:8080
    python file_job.py --url http://127.0.0.1:8080 submit ./myjob     # writes <id>.zip
"""

import argparse
import os
import signal
import subprocess
import sys
import zipfile

import jetflow

TYPE = "orchestrator.run"

worker = jetflow.Worker(name="orchestrator", concurrency=2)


@worker.task(TYPE)
def run(job):
    if "run.sh" not in job.inputs:
        raise jetflow.Permanent("no run.sh among the job's files", code="NO_RUN_SH")
    out = job.output_dir / "out"
    out.mkdir()
    env = dict(os.environ, JETFLOW_OUTPUT=str(out), JETFLOW_JOB_ID=job.id)
    with open(job.output_dir / "stdout.txt", "wb") as so, open(job.output_dir / "stderr.txt", "wb") as se:
        proc = subprocess.Popen(["sh", "run.sh"], cwd=job.input_dir, stdout=so, stderr=se, env=env,
                                start_new_session=True)
        try:
            while proc.poll() is None:
                if job.cancelled.wait(0.1):  # cancelled, deadline or shutdown: stop run.sh
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    job.check()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if proc.returncode != 0:
        raise jetflow.JobError("EXIT_%d" % proc.returncode, "run.sh exited %d" % proc.returncode, retryable=False)
    return {"exit": 0, "outputs": sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())}


def submit_dir(client, path, dest=None, timeout=None):
    """Uploads the directory as the job's files, waits for the job and
    downloads its archive to dest (default <id>.zip); returns (job, dest)."""
    job = client.submit(TYPE, files=[path], max_retries=0)
    done = client.wait(job.id, timeout=timeout)
    dest = dest or "%s.zip" % job.id
    try:
        client.download(job.id, dest)
    except jetflow.NoArchive:
        dest = None
    return done, dest


def main(argv=None):
    ap = argparse.ArgumentParser(description="run a directory's run.sh as a jetflow job")
    ap.add_argument("--url", default=os.environ.get("JETFLOW_URL", jetflow.DEFAULT_URL))
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit", help="upload DIR, run its run.sh, download the results")
    s.add_argument("dir")
    s.add_argument("-o", "--output", help="where to write the archive (default <id>.zip)")
    args = ap.parse_args(argv)
    done, dest = submit_dir(jetflow.Client(args.url), args.dir, args.output)
    print("%s %s" % (done.id, done.state))
    if dest:
        for name in zipfile.ZipFile(dest).namelist():
            print("  " + name)
        print("results: %s" % dest)
    return 0 if done.state == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
