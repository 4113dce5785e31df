#!/usr/bin/env python3
"""A cbintel-style client: submits a job and prints its progress until it
ends, by polling (GET with a long poll, the default) or by following its
event stream (--follow). Exits 0 when the job succeeded.

    python cbintel_client.py --url http://127.0.0.1:8080 cbintel.crawl '{"urls": ["https://a", "https://b"]}'
"""

import argparse
import json
import os
import sys

import jetflow


def poll(client, job_id, out):
    """Prints the job's progress each time it changes, until it ends."""
    last = None
    while True:
        job = client.get(job_id, wait=1)  # answers at once when the job ends
        p = job.progress
        if p and (p["current"], p["total"], p.get("message")) != last:
            last = (p["current"], p["total"], p.get("message"))
            print("[%d/%d] %s" % last, file=out)
        if job.terminal:
            return job


def follow(client, job_id, out):
    """Prints the job's events as they happen, until it ends."""
    for ev in client.follow(job_id):
        if ev.type == "job.progress":
            p = ev.progress
            print("[%d/%d] %s" % (p["current"], p["total"], p.get("message", "")), file=out)
        elif ev.type == "job.started":
            print("running (attempt %d)" % ev.attempt, file=out)
        elif ev.type == "job.retry_scheduled":
            print("attempt %d failed (%s); retrying" % (ev.attempt, ev.error["message"]), file=out)
    return client.get(job_id)


def main(argv=None, out=sys.stdout):
    ap = argparse.ArgumentParser(description="submit a job and print its progress")
    ap.add_argument("--url", default=os.environ.get("JETFLOW_URL", jetflow.DEFAULT_URL))
    ap.add_argument("--follow", action="store_true", help="follow the event stream instead of polling")
    ap.add_argument("type")
    ap.add_argument("payload", nargs="?", default="null", help="the payload, JSON")
    args = ap.parse_args(argv)
    client = jetflow.Client(args.url)
    try:
        job = client.submit(args.type, json.loads(args.payload))
    except jetflow.JetflowError as e:
        print("submit: %s" % e, file=sys.stderr)
        return 2
    print("submitted %s" % job.id, file=out)
    try:
        job = (follow if args.follow else poll)(client, job.id, out)
    except KeyboardInterrupt:
        client.cancel(job.id, reason="interrupted")
        print("cancelled %s" % job.id, file=out)
        return 130
    if job.state == "succeeded":
        print("succeeded: %s" % json.dumps(job.result), file=out)
        return 0
    print("%s: %s" % (job.state, (job.error or {}).get("message", "")), file=out)
    return 1


if __name__ == "__main__":
    sys.exit(main())
