#!/usr/bin/env python3
"""A jetflow worker in Python, standard library only.

It speaks the HTTP worker protocol (docs/http.md): register, heartbeat,
long-poll claims, report running / progress / succeeded / failed, and
unregister on exit, which hands unfinished jobs back at once.

    python3 worker.py --url http://127.0.0.1:8080 --types py.reverse,py.fail

Handlers are plain functions: handler(job, report) -> result. report(current,
total, message) sends progress; raising JobError(code, message, retryable)
fails the attempt with a code; any other exception fails it retryably.

Jobs with files (docs/files.md): the job's input files are downloaded first,
as job["inputs"] (name -> bytes); what a handler puts in job["outputs"] (name
-> bytes) is zipped and uploaded as the job's result archive before the
outcome is reported, whether it succeeded or failed.
"""
import io
import argparse
import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile


class ProblemError(Exception):
    """An error answer of the API (RFC 9457 problem+json)."""

    def __init__(self, status, problem):
        super().__init__("%s %s: %s" % (status, problem.get("type"), problem.get("detail")))
        self.status = status
        self.type = problem.get("type")
        self.problem = problem


class JobError(Exception):
    """A handler's failure with a stable code."""

    def __init__(self, code, message, retryable=True):
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class Lost(Exception):
    """The worker no longer holds the job (cancelled, or its lease expired)."""


class Client:
    def __init__(self, url):
        self.url = url.rstrip("/") + "/api/v1"

    def call(self, method, path, body=None, timeout=90, raw=None, content_type="application/json"):
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                out = res.read()
                if res.headers.get_content_type() != "application/json":
                    return out
                return json.loads(out or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                problem = json.loads(raw)
            except ValueError:
                problem = {"type": "http", "detail": raw.decode(errors="replace")}
            raise ProblemError(e.code, problem) from None


class Worker:
    def __init__(self, client, name, types, queues, handlers, concurrency=1, log=print):
        self.client, self.name, self.types, self.queues = client, name, types, queues
        self.handlers, self.concurrency, self.log = handlers, concurrency, log
        self.id = None
        self.stopping = threading.Event()
        self.lost = set()
        self.lock = threading.Lock()

    def register(self):
        w = self.client.call("POST", "/workers", {"name": self.name, "types": self.types,
                                                  "queues": self.queues, "concurrency": self.concurrency})
        self.id, self.interval = w["id"], w["heartbeat_interval_seconds"]
        self.log("registered %s (heartbeat every %.1fs, lease %.0fs)" % (self.id, self.interval, w["lease_seconds"]))

    def heartbeats(self):
        while not self.stopping.wait(self.interval):
            try:
                hb = self.client.call("POST", "/workers/%s/heartbeat" % self.id, timeout=10)
                with self.lock:
                    self.lost.update(hb["lost"])
            except ProblemError as e:
                if e.status == 404:  # expired after a long silence: start over
                    self.log("registration expired; registering again")
                    self.register()
                else:
                    self.log("heartbeat: %s" % e)
            except OSError as e:
                self.log("heartbeat: %s" % e)

    def report(self, job_id, body):
        body["worker_id"] = self.id
        return self.client.call("PATCH", "/jobs/%s" % job_id, body)

    def run_one(self, job):
        jid = job["id"]
        handler = self.handlers[job["type"]]

        def progress(current, total, message=""):
            with self.lock:
                if jid in self.lost:
                    raise Lost(jid)
            self.report(jid, {"progress": {"current": current, "total": total, "message": message}})

        self.report(jid, {"state": "running"})
        q = "?worker_id=" + urllib.parse.quote(self.id)
        job["inputs"] = {f["name"]: self.client.call("GET", "/jobs/%s/inputs/%s%s" % (jid, urllib.parse.quote(f["name"]), q))
                         for f in job.get("files") or []}
        job["outputs"] = {}

        def upload():
            if job["outputs"]:
                buf = io.BytesIO()
                with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
                    for name, data in sorted(job["outputs"].items()):
                        z.writestr(name, data)
                self.client.call("PUT", "/jobs/%s/result%s" % (jid, q), raw=buf.getvalue(), content_type="application/zip")

        try:
            try:
                result = handler(job, progress)
            finally:
                upload()
        except Lost:
            self.log("job %s: lost (cancelled or lease expired); dropped" % jid)
            return
        except JobError as e:
            self.report(jid, {"state": "failed", "error": {"code": e.code, "message": str(e)}, "retryable": e.retryable})
            self.log("job %s: failed %s" % (jid, e.code))
            return
        except Exception as e:  # noqa: BLE001 - any handler error fails the attempt
            self.report(jid, {"state": "failed", "error": {"code": "ERROR", "message": repr(e)}})
            self.log("job %s: failed %r" % (jid, e))
            return
        self.report(jid, {"state": "succeeded", "result": result})
        self.log("job %s: succeeded" % jid)

    def run(self, max_jobs=0, wait=20):
        self.register()
        threading.Thread(target=self.heartbeats, daemon=True).start()
        done = 0
        try:
            while not self.stopping.is_set() and (max_jobs == 0 or done < max_jobs):
                try:
                    claim = self.client.call("POST", "/tasks/claim", {"worker_id": self.id, "wait": wait})
                except ProblemError as e:
                    if e.status == 404:
                        self.register()
                    else:
                        self.log("claim: %s" % e)
                        self.stopping.wait(1)
                    continue
                except OSError as e:
                    self.log("claim: %s" % e)
                    self.stopping.wait(1)
                    continue
                job = claim["job"]
                if job is None:
                    continue
                try:
                    self.run_one(job)
                except ProblemError as e:
                    # not-claimant / invalid-transition: the job moved on (cancelled).
                    self.log("job %s: report refused: %s" % (job["id"], e))
                done += 1
        finally:
            self.stopping.set()
            try:
                self.client.call("DELETE", "/workers/%s" % self.id, timeout=10)
                self.log("unregistered %s" % self.id)
            except (ProblemError, OSError) as e:
                self.log("unregister: %s" % e)


# Example handlers.

def reverse(job, progress):
    text = (job["payload"] or {}).get("text", "")
    progress(0, 2, "starting")
    out = text[::-1]
    progress(2, 2, "reversed %d characters" % len(text))
    return {"reversed": out}


def fail(job, progress):
    raise JobError("PY_FAIL", "failed on purpose: %s" % json.dumps(job["payload"]), retryable=False)


def slow(job, progress):
    seconds = float((job["payload"] or {}).get("seconds", 1))
    end = time.time() + seconds
    while time.time() < end:
        progress(int(seconds - (end - time.time())), int(seconds), "sleeping")
        time.sleep(min(0.2, max(0, end - time.time())))
    return {"slept": seconds}


def upper(job, progress):
    for name, data in job["inputs"].items():
        job["outputs"]["out/" + name] = data.upper()
    return {"files": len(job["inputs"])}


HANDLERS = {"py.reverse": reverse, "py.fail": fail, "py.slow": slow, "py.upper": upper}


def main():
    ap = argparse.ArgumentParser(description="jetflow worker over HTTP")
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--name", default="python-worker")
    ap.add_argument("--types", default=",".join(HANDLERS))
    ap.add_argument("--queues", default="default")
    ap.add_argument("--max-jobs", type=int, default=0, help="exit after this many jobs (0: run until signalled)")
    ap.add_argument("--wait", type=float, default=20, help="long-poll seconds of each claim")
    args = ap.parse_args()
    types = [t for t in args.types.split(",") if t]
    unknown = [t for t in types if t not in HANDLERS]
    if unknown:
        ap.error("no handler for %s" % ", ".join(unknown))
    w = Worker(Client(args.url), args.name, types, args.queues.split(","), HANDLERS,
               log=lambda m: print(m, file=sys.stderr, flush=True))
    signal.signal(signal.SIGTERM, lambda *_: w.stopping.set())
    try:
        w.run(max_jobs=args.max_jobs, wait=args.wait)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
