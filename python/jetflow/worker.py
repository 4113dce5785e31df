"""The jetflow worker: runs Python handlers for job types over the HTTP
worker protocol (docs/http.md, "Worker protocol"; WIRE-19 for retry-later,
fan-out, batches, heartbeat long polls and deadlines).

    worker = jetflow.Worker("http://127.0.0.1:8080", name="img", concurrency=4)

    @worker.task("img.resize")
    def resize(job):
        job.progress(0, 1, "resizing")
        return {"ok": True}

    worker.run()   # until SIGTERM / SIGINT
"""

import asyncio
import base64
import datetime
import hashlib
import inspect
import json
import logging
import os
import pathlib
import shutil
import signal
import socket
import tempfile
import threading
import time
import traceback
import urllib.parse
import zipfile

from . import errors, tracing
from ._http import Call, dumps
from .client import Client, duration, submit_body

__all__ = ["Worker", "Job", "Batch", "RetryLater", "Permanent", "JobError", "Cancelled", "FanOut", "Batches",
           "DEADLINE_OVERRUN"]

log = logging.getLogger("jetflow.worker")

# How long a handler may run past its deadline (it is told at the deadline,
# through job.cancelled) before the worker reports the attempt failed with
# TIMEOUT itself; the server ends it a little later (deadline + its grace).
DEADLINE_OVERRUN = 1.0

MAX_MESSAGE = 64 << 10
MAX_STACK = 256 << 10
MAX_REASON = 1024
MAX_EVENT_MESSAGE = 4096


# Outcomes a handler raises (or, for FanOut, returns).


class RetryLater(Exception):
    """Run the job again after ``delay_seconds`` without spending a retry
    (a busy resource: "GPU busy")."""

    def __init__(self, delay_seconds, reason=""):
        super().__init__(reason or "retry later")
        if isinstance(delay_seconds, datetime.timedelta):
            delay_seconds = delay_seconds.total_seconds()
        if not isinstance(delay_seconds, (int, float)) or isinstance(delay_seconds, bool) or delay_seconds < 0:
            raise ValueError("RetryLater: delay_seconds must be a number >= 0, not %r" % (delay_seconds,))
        self.delay_seconds = delay_seconds
        self.reason = reason


class Permanent(Exception):
    """Fail the job for good: no retry. ``message`` may be an exception."""

    def __init__(self, message="", code="ERROR"):
        super().__init__(str(message))
        self.code = code
        self.cause = message if isinstance(message, BaseException) else None


class JobError(Exception):
    """Fail the attempt with an error code (matched by the job's
    ``retry_on`` / ``no_retry_on``); retried while retries are left unless
    ``retryable`` is False."""

    def __init__(self, code, message, retryable=True, stack=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.stack = stack


class NotAStep(KeyError):
    """Job.output of a step the job does not depend on (or of a job that is
    no step)."""


class Cancelled(BaseException):
    """Raised in a handler by job.sleep(), job.check() and job.progress()
    once the attempt is over for it: ``reason`` is ``"cancelled"`` (the job
    was cancelled, or the worker lost it), ``"deadline"`` (its execution
    timeout passed) or ``"shutdown"`` (the worker stops). A BaseException,
    so that ``except Exception`` in a handler does not swallow it."""

    def __init__(self, reason="cancelled"):
        super().__init__(reason)
        self.reason = reason


class Batches:
    """The batches of a fan-out: one piece of work per item (its payload),
    run by ``@worker.batch(type)`` handlers, with no job record each."""

    def __init__(self, type, items, queue=None, max_retries=None, backoff=None, timeout=None):
        self.type = type
        self.items = list(items)
        self.queue = queue
        self.max_retries = max_retries
        self.backoff = backoff
        self.timeout = timeout

    def body(self):
        b = {"type": self.type, "items": self.items}
        if self.queue is not None:
            b["queue"] = self.queue
        if self.max_retries is not None:
            b["max_retries"] = self.max_retries
        if self.backoff is not None:
            b["backoff"] = duration(self.backoff, "backoff")
        if self.timeout is not None:
            b["timeout"] = duration(self.timeout, "timeout")
        return b


class FanOut(Exception):
    """A coordinator's outcome (returned or raised): the job waits for its
    pieces, ``children`` (submit bodies: dicts as POST /jobs takes, see
    FanOut.child) or ``batches`` (a Batches), and completes exactly once
    when they are done, under ``failure_policy``: ``"all"`` (every piece
    must succeed), ``"fail_fast"`` (the first failure fails it and cancels
    the rest) or ``"tolerate"`` (fails once more than
    ``max_failure_ratio`` of the pieces failed)."""

    def __init__(self, children=None, batches=None, failure_policy=None, max_failure_ratio=None,
                 stall_timeout=None):
        super().__init__("fan-out")
        if (children is None) == (batches is None):
            raise ValueError("FanOut: give children or batches (exactly one)")
        if children is not None:
            children = [dict(c) for c in children]
            for c in children:
                if "namespace" in c or "parent" in c:
                    raise ValueError("FanOut: a child's namespace and parent are its parent's; leave them out")
        if batches is not None and not isinstance(batches, Batches):
            raise TypeError("FanOut: batches must be a jetflow.Batches")
        if failure_policy not in (None, "all", "fail_fast", "tolerate"):
            raise ValueError("FanOut: failure_policy is all, fail_fast or tolerate, not %r" % failure_policy)
        self.children = children
        self.batches = batches
        self.failure_policy = failure_policy
        self.max_failure_ratio = max_failure_ratio
        self.stall_timeout = stall_timeout

    @staticmethod
    def child(type, payload=None, **options):
        """A child's submit body: the options of Client.submit but
        namespace, parent and files."""
        for k in ("namespace", "parent", "files"):
            if k in options:
                raise TypeError("FanOut.child: %s is not an option of a child" % k)
        return submit_body(type, payload, **options)

    def body(self):
        f = {}
        if self.children is not None:
            f["children"] = self.children
        else:
            f["batches"] = self.batches.body()
        if self.failure_policy is not None:
            f["failure_policy"] = self.failure_policy
        if self.max_failure_ratio is not None:
            f["max_failure_ratio"] = self.max_failure_ratio
        if self.stall_timeout is not None:
            f["stall_timeout"] = duration(self.stall_timeout, "stall_timeout")
        return f


# What handlers get.


def _parse_time(s):
    if not s:
        return None
    s = s.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    # Python before 3.11 takes at most 6 digits of fraction.
    head, dot, rest = s.partition(".")
    if dot:
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        s = head + "." + rest[:i][:6].ljust(6, "0") + rest[i:]
    try:
        return datetime.datetime.fromisoformat(s)
    except ValueError:
        return None


class _Attempt:
    """What a job and a batch have in common: cancellation, the deadline,
    and exactly one report of the outcome."""

    kind = "job"

    def __init__(self, worker, info):
        self._worker = worker
        self.info = info
        self.id = info["id"]
        self.type = info.get("type")
        self.queue = info.get("queue")
        self.payload = info.get("payload")
        self.traceparent = info.get("traceparent") or None
        self.tracestate = info.get("tracestate") or None
        self.worker_id = worker.id
        self.cancelled = threading.Event()
        self.cancel_reason = None
        self.deadline = None  # datetime (UTC) the execution timeout ends
        self._deadline_mono = None
        self._lock = threading.Lock()
        self._reported = False  # the outcome was reported (or given up)
        self._lost = False  # the server no longer lets this attempt report
        self._done = False  # the handler returned
        self._timers = []
        self.log = log

    def _cancel(self, reason):
        with self._lock:
            if self.cancel_reason is None:
                self.cancel_reason = reason
        self.cancelled.set()

    def _lose(self):
        with self._lock:
            self._lost = True
        self._cancel("cancelled")

    def check(self):
        """Raises Cancelled if the attempt is over for the handler."""
        if self.cancelled.is_set():
            raise Cancelled(self.cancel_reason or "cancelled")

    def sleep(self, seconds):
        """Sleeps, unless the attempt ends first: then raises Cancelled."""
        if self.cancelled.wait(max(0.0, seconds)):
            raise Cancelled(self.cancel_reason or "cancelled")

    def time_left(self):
        """Seconds until the deadline (None without one)."""
        if self._deadline_mono is None:
            return None
        return self._deadline_mono - time.monotonic()

    def _set_deadline(self, info, fallback_start):
        dl = _parse_time(info.get("deadline")) if info else None
        if dl is not None:
            if dl.tzinfo is None:
                dl = dl.replace(tzinfo=datetime.timezone.utc)
            left = (dl - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
            self.deadline = dl.astimezone(datetime.timezone.utc)
            self._deadline_mono = time.monotonic() + left
            return
        t = (info or {}).get("timeout_seconds") or self.info.get("timeout_seconds")
        if t:
            self._deadline_mono = fallback_start + float(t)
            now = datetime.datetime.now(datetime.timezone.utc)
            self.deadline = now + datetime.timedelta(seconds=self._deadline_mono - time.monotonic())

    def _arm(self):
        if self._deadline_mono is None:
            return
        t = threading.Timer(max(0.0, self._deadline_mono - time.monotonic()), self._on_deadline)
        t.daemon = True
        self._timers.append(t)
        t.start()

    def _on_deadline(self):
        if self._done:
            return
        self._cancel("deadline")
        t = threading.Timer(self._worker.deadline_overrun, self._on_overrun)
        t.daemon = True
        self._timers.append(t)
        t.start()

    def _on_overrun(self):
        with self._lock:
            if self._done or self._reported or self._lost:
                return
            self._reported = True
        self.log.warning("%s %s: the handler overran its deadline; reported failed (TIMEOUT)", self.kind, self.id)
        self._worker._report_outcome(self, "failed", self._timeout_error(), retryable=True)

    def _timeout_error(self):
        t = self.info.get("timeout_seconds")
        return {"code": "TIMEOUT", "message": "execution timeout%s passed" % (" of %gs" % t if t else "")}

    def _disarm(self):
        for t in self._timers:
            t.cancel()


class Job(_Attempt):
    """The job a handler runs.

    ``id``, ``type``, ``queue``, ``namespace``, ``payload``, ``attempt`` (1
    for the first), ``parent_id``, ``deadline`` (a UTC datetime: when the
    attempt's execution timeout ends), ``traceparent`` and ``tracestate``
    (W3C trace context: the attempt's span when the server traces, else the
    job's own; None when the job is in no trace; the current trace context
    while the handler runs, see jetflow.tracing), ``info`` (the job object as
    claimed), ``inputs`` (name -> pathlib.Path of each input file,
    downloaded into ``input_dir``), ``output_dir`` (what the handler leaves
    there is zipped and uploaded as the job's result archive before the
    outcome is reported), ``cancelled`` (a threading.Event set when the
    attempt is over for the handler: ``cancel_reason`` says why).

    A step of a workflow also has ``step`` (its name; None for a plain
    job), ``depends_on`` (the steps it waits for) and its dependencies'
    results: ``output(name)`` and ``outputs()`` (docs/workflows.md).
    """

    kind = "job"

    def __init__(self, worker, info):
        super().__init__(worker, info)
        self.namespace = info.get("namespace")
        self.parent_id = info.get("parent_id")
        self.attempt = (info.get("attempts") or 0) + 1
        self.files = list(info.get("files") or [])
        self.inputs = {}
        self.input_dir = None
        self.output_dir = None
        self._dir = None
        step = info.get("step") or {}
        self.step = step.get("name")
        self.depends_on = list(step.get("depends_on") or [])

    def output(self, step):
        """The result of ``step``, a step this one depends on, decoded from
        JSON (None for a step that returned nothing). The claimed job
        carries the results while they fit 1 MiB together; a larger one is
        read from the server. A step this one does not depend on raises
        NotAStep."""
        inline = self.info.get("inputs") or {}
        if step in inline:
            return inline[step]
        ref = (self.info.get("input_refs") or {}).get(step)
        if ref is None:
            raise NotAStep("job %s (step %r) does not depend on a step %r" % (self.id, self.step, step))
        return self._worker.client.request("GET", ref, query={"worker_id": self.worker_id}, root=True)

    def outputs(self):
        """The results of every step this one depends on, by step name."""
        names = list(self.info.get("inputs") or {}) + list(self.info.get("input_refs") or {})
        return {n: self.output(n) for n in names}

    def progress(self, current, total, message=""):
        """Reports progress (coalesced by the server: report as often as is
        convenient). Raises Cancelled once the worker no longer holds the job."""
        if self._lost:
            raise Cancelled("cancelled")
        body = {"progress": {"current": int(current), "total": int(total)}}
        if message:
            body["progress"]["message"] = str(message)[:4096]
        try:
            self._worker._patch_job(self, body, retries=1)
        except (errors.NotClaimant, errors.InvalidTransition, errors.NotFound):
            self._lose()
            raise Cancelled("cancelled") from None
        except errors.JetflowError as e:
            if isinstance(e, errors.InvalidInput):
                raise
            self.log.warning("job %s: progress not reported: %s", self.id, e)

    def event(self, name, message="", level="info", fields=None):
        """Appends an event of the handler's own to the job's history
        (job.event, with ``name``, ``message``, ``level`` info|warning|error
        and ``fields``, a JSON object). On a server without worker events it
        is logged here instead."""
        if level not in ("info", "warning", "error"):
            raise ValueError("level is info, warning or error, not %r" % (level,))
        if fields is not None and not isinstance(fields, dict):
            raise TypeError("fields: want a dict")
        ev = {"name": name, "level": level}
        if message:
            ev["message"] = str(message).encode("utf-8")[:MAX_EVENT_MESSAGE].decode("utf-8", "ignore")
        if fields:
            ev["fields"] = fields
        w = self._worker
        if w._features.get("events") is not False:
            try:
                w._patch_job(self, {"event": ev}, retries=1)
                w._features["events"] = True
                return
            except errors.MalformedRequest as e:
                if w._features.get("events") is True or "event" not in e.detail:
                    raise
                w._features["events"] = False
                log.warning("the server takes no worker events (PATCH /jobs/{id} \"event\"); they are logged here")
            except (errors.NotClaimant, errors.InvalidTransition, errors.NotFound):
                self._lose()
                raise Cancelled("cancelled") from None
            except errors.JetflowError as e:
                if isinstance(e, errors.InvalidInput):
                    raise
                self.log.warning("job %s: event %s not recorded: %s", self.id, name, e)
                return
        logging.getLogger("jetflow.job").log(
            {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}[level],
            "job %s: %s %s %s", self.id, name, message, json.dumps(fields) if fields else "")

    def __repr__(self):
        return "<jetflow.Job %s %s attempt %d>" % (self.type, self.id, self.attempt)


class Batch(_Attempt):
    """A batch of a fan-out, as its handler sees it: ``id``, ``parent_id``,
    ``piece`` (1-based), ``type``, ``queue``, ``attempt``, ``payload``,
    ``deadline``, ``cancelled``, ``traceparent`` (the fan-out's that made
    it, or None)."""

    kind = "batch"

    def __init__(self, worker, info):
        super().__init__(worker, info)
        self.parent_id = info.get("parent_id")
        self.piece = info.get("piece")
        self.attempt = info.get("attempt") or 1

    def __repr__(self):
        return "<jetflow.Batch %s piece %s of %s>" % (self.type, self.piece, self.parent_id)


# The worker.


class _Handler:
    def __init__(self, fn, name, schema):
        self.fn = fn
        self.name = name
        self.schema = schema


class Worker:
    """Runs handlers of job types (``@worker.task``) and of fan-out batches
    (``@worker.batch``) for a jetflow server.

    ``concurrency`` handlers run at once (threads); ``queues`` narrows the
    worker to those queues (default: every queue); ``namespace`` is where
    its ``category:name`` types are registered; ``grace`` is how long
    running handlers may finish when the worker stops before their jobs are
    given back; ``claim_wait`` the long poll of each claim.
    """

    def __init__(self, base_url=None, name=None, concurrency=1, queues=None, namespace=None, token=None,
                 grace=10.0, claim_wait=20.0, heartbeat_wait=True, deadline_overrun=DEADLINE_OVERRUN,
                 work_dir=None):
        self.base_url = base_url
        self.name = name or "py-%s-%d" % (socket.gethostname(), os.getpid())
        self.concurrency = int(concurrency)
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.queues = list(queues) if queues is not None else None
        self.namespace = namespace
        self.token = token
        self.grace = grace
        self.claim_wait = claim_wait
        self.heartbeat_wait = heartbeat_wait
        self.deadline_overrun = deadline_overrun
        self.work_dir = work_dir
        self.client = None
        self.id = None
        self.lease_seconds = None
        self.heartbeat_interval = None
        self.heartbeat_mode = None  # "long-poll" or "periodic", once known
        self.heartbeats = 0  # heartbeats answered
        self.registration = None
        self._tasks = {}
        self._batches = {}
        self._by_type = {}
        self._batch_types_active = False
        self._features = {}
        self._lock = threading.Lock()
        self._reg_lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._active = {}
        self._slots = None
        self._stop = threading.Event()
        self._hard = threading.Event()
        self._stopped = threading.Event()
        self._hb_stop = threading.Event()
        self._claim_call = None
        self._hb_call = None
        self._threads = []
        self._stop_thread = None
        self.error = None  # what stopped the worker, if not a stop()
        self.counts = {"succeeded": 0, "failed": 0, "retry_later": 0, "waiting": 0, "given_back": 0,
                       "dropped": 0}

    # Declaring handlers.

    def task(self, type, schema=None):
        """Decorator: ``fn(job)`` runs jobs of ``type`` (a free-form name like
        ``img.resize``, or a registered ``category:name`` /
        ``scope:category:name``, registered with ``schema``, a JSON Schema
        dict, when the worker registers). Its return value is the job's
        result (JSON); it may raise RetryLater, Permanent, JobError, or
        return/raise a FanOut."""
        def deco(fn):
            if type in self._tasks:
                raise ValueError("a handler of %s is already declared" % type)
            self._tasks[type] = _Handler(fn, type, schema)
            return fn
        return deco

    def batch(self, type):
        """Decorator: ``fn(batch)`` runs batches of ``type`` (a coordinator's
        FanOut(batches=Batches(type, ...)))."""
        def deco(fn):
            if type in self._batches:
                raise ValueError("a batch handler of %s is already declared" % type)
            self._batches[type] = _Handler(fn, type, None)
            return fn
        return deco

    # Running.

    @property
    def stopping(self):
        """A threading.Event set once the worker stops claiming."""
        return self._stop

    def configure(self, base_url=None, name=None, concurrency=None, token=None, queues=None, namespace=None,
                  grace=None):
        """Changes settings before the worker starts (the command line's flags)."""
        if self.id is not None:
            raise RuntimeError("the worker has started")
        for k, v in (("base_url", base_url), ("name", name), ("token", token), ("namespace", namespace),
                     ("grace", grace)):
            if v is not None:
                setattr(self, k, v)
        if concurrency is not None:
            if int(concurrency) < 1:
                raise ValueError("concurrency must be at least 1")
            self.concurrency = int(concurrency)
        if queues is not None:
            self.queues = list(queues)

    def start(self):
        """Registers the worker and starts claiming in background threads;
        returns the worker. Errors of the registration are raised here."""
        if not self._tasks and not self._batches:
            raise RuntimeError("no handlers: declare some with @worker.task or @worker.batch")
        if self.id is not None:
            raise RuntimeError("the worker has started")
        self.client = Client(self.base_url, token=self.token, namespace=self.namespace)
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._register()
        for name, target in (("heartbeat", self._heartbeat_loop), ("claim", self._claim_loop)):
            t = threading.Thread(target=target, name="jetflow-%s" % name, daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def run(self, install_signals=True):
        """Runs until stopped: SIGTERM or SIGINT (in the main thread) stops it
        gracefully, a second one at once. Raises what stopped it otherwise."""
        self.start()
        old = {}
        if install_signals and threading.current_thread() is threading.main_thread():
            def on_signal(signum, frame):
                if self._stop.is_set():
                    log.warning("second signal: stopping now")
                    self._hard.set()
                else:
                    log.info("signal %d: stopping (grace %gs)", signum, self.grace)
                    self.stop(wait=False)
            for s in (signal.SIGTERM, signal.SIGINT):
                old[s] = signal.signal(s, on_signal)
        try:
            while not self._stopped.wait(0.25):
                pass
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        if self.error is not None:
            raise self.error

    def stop(self, grace=None, wait=True):
        """Stops the worker: no more claims; running handlers get ``grace``
        seconds (default: the worker's) to finish, then they are told
        (Cancelled, reason "shutdown") and their jobs given back to their
        queues; then the worker unregisters. Idempotent."""
        with self._lock:
            if self._stop_thread is None and self.id is not None:
                g = self.grace if grace is None else grace
                self._stop_thread = threading.Thread(target=self._shutdown, args=(g,), name="jetflow-stop",
                                                     daemon=True)
                self._stop_thread.start()
            elif self.id is None:
                self._stopped.set()
        if grace == 0:
            self._hard.set()
        self._stop.set()
        call = self._claim_call
        if call is not None:
            call.abort()
        if wait:
            self._stopped.wait()

    def wait_stopped(self, timeout=None):
        return self._stopped.wait(timeout)

    def active(self):
        """The ids of the jobs and batches running now."""
        with self._lock:
            return sorted(self._active)

    # Registration.

    def _register(self):
        types = []
        for h in self._tasks.values():
            types.append({"name": h.name, "schema": h.schema} if h.schema is not None else h.name)
        body = {"name": self.name, "types": types, "concurrency": self.concurrency}
        if self.queues is not None:
            body["queues"] = self.queues
        if self.namespace:
            body["namespace"] = self.namespace
        if self._batches:
            body["batch_types"] = sorted(self._batches)
        try:
            rec = self.client.request("POST", "/workers", body)
            self._batch_types_active = bool(self._batches)
        except errors.MalformedRequest as e:
            if "batch_types" not in body or "batch_types" not in e.detail:
                raise
            if not self._tasks:
                raise errors.JetflowError("the server runs no batches for HTTP workers (WIRE-19 §3): %s" % e.detail)
            log.warning("the server runs no batches for HTTP workers: batch handlers %s are not served",
                        ", ".join(sorted(self._batches)))
            self._features["batches"] = False
            del body["batch_types"]
            rec = self.client.request("POST", "/workers", body)
            self._batch_types_active = False
        self.registration = rec
        self.lease_seconds = rec.get("lease_seconds")
        self.heartbeat_interval = float(rec.get("heartbeat_interval_seconds") or 10)
        by_type = {}
        for full in rec.get("types") or []:
            h = self._tasks.get(full)
            if h is None:
                parts = full.split(":")
                for name, cand in self._tasks.items():
                    cp = name.split(":")
                    if len(cp) == 2 and len(parts) == 3 and parts[1:] == cp:
                        h = cand
            if h is not None:
                by_type[full] = h
        self._by_type = by_type
        self.id = rec["id"]
        log.info("worker %s registered (%s): %s; heartbeat every %gs", self.id, self.name,
                 ", ".join(list(rec.get("types") or []) + sorted(self._batches if self._batch_types_active else [])),
                 self.heartbeat_interval)

    def _reregister(self, old):
        """Registers again after the registration ``old`` expired (once,
        whichever of the claim and heartbeat threads saw it first)."""
        with self._reg_lock:
            if self.id != old or self._stop.is_set():
                return
            log.warning("worker %s expired (silent too long); registering again", old)
            self._register()
        with self._lock:
            lost = [a for a in self._active.values() if a.worker_id == old]
        for a in lost:
            a._lose()

    # Heartbeats.

    def _heartbeat_loop(self):
        periodic = not self.heartbeat_wait
        quick = 0
        while not self._hb_stop.is_set():
            interval = self.heartbeat_interval or 10.0
            wait = min(interval, 60.0)
            t0 = time.monotonic()
            call = Call()
            self._hb_call = call
            wid = self.id
            try:
                body = None if periodic else {"wait": round(wait, 3)}
                hb = self.client.request("POST", "/workers/%s/heartbeat" % wid, body,
                                         timeout=(0 if periodic else wait) + 15, call=call)
            except errors.NotFound:
                if self._hb_stop.is_set():
                    return
                try:
                    self._reregister(wid)
                except errors.JetflowError as e:
                    log.error("register again: %s", e)
                    self._hb_stop.wait(1.0)
                continue
            except errors.JetflowError as e:
                if self._hb_stop.is_set():
                    return
                log.warning("heartbeat: %s", e)
                self._hb_stop.wait(min(1.0, interval))
                continue
            finally:
                self._hb_call = None
            self.heartbeats += 1
            lost = hb.get("lost") or []
            for i in lost:
                with self._lock:
                    a = self._active.get(i)
                if a is not None and a.worker_id == wid and not a._reported:
                    log.info("%s %s: lost (cancelled, ended or taken over); the handler is told", a.kind, i)
                    a._lose()
            elapsed = time.monotonic() - t0
            if lost:
                continue  # beat again at once: a long poll answers early only for a loss
            if not periodic:
                # A server that knows "wait" holds the answer; one that
                # does not answers at once: then beat every interval.
                quick = quick + 1 if elapsed < wait / 2 else 0
                if quick >= 2:
                    periodic = True
                    log.info("the server answers heartbeats at once: beating every %gs", interval)
                elif quick == 0:
                    self.heartbeat_mode = "long-poll"
            if periodic:
                self.heartbeat_mode = "periodic"
            if elapsed < interval:
                self._hb_stop.wait(interval - elapsed)

    # Claims.

    def _claim_loop(self):
        try:
            self._claims()
        except BaseException as e:  # noqa: B902 - the worker must not die silently
            log.exception("claim loop failed")
            self.error = e if isinstance(e, Exception) else RuntimeError(str(e))
            self.stop(wait=False)

    def _claims(self):
        failures = 0
        while not self._stop.is_set():
            while not self._slots.acquire(timeout=0.25):
                if self._stop.is_set():
                    return
            if self._stop.is_set():
                self._slots.release()
                return
            call = Call()
            self._claim_call = call
            wid = self.id
            try:
                out = self.client.request("POST", "/tasks/claim", {"worker_id": wid, "wait": self.claim_wait},
                                          timeout=self.claim_wait + 15, call=call)
                failures = 0
            except errors.NotFound:
                self._slots.release()
                try:
                    self._reregister(wid)
                except errors.JetflowError as e:
                    log.error("register again: %s", e)
                    self._stop.wait(1.0)
                continue
            except errors.ConcurrencyLimit:
                # The server still counts a claim this worker let go of (a
                # report in flight): ask again shortly.
                self._slots.release()
                self._stop.wait(0.2)
                continue
            except (errors.Unauthorized, errors.Forbidden):
                self._slots.release()
                raise
            except errors.JetflowError as e:
                self._slots.release()
                if self._stop.is_set():
                    return
                failures += 1
                log.warning("claim: %s", e)
                self._stop.wait(min(5.0, 0.2 * 2 ** failures))
                continue
            finally:
                self._claim_call = None
            info = out.get("job")
            binfo = out.get("batch")
            if info is None and binfo is None:
                self._slots.release()
                continue
            if info is not None:
                a = Job(self, info)
                a.worker_id = wid
            else:
                a = Batch(self, binfo)
                a.worker_id = wid
            if self._stop.is_set():
                self._give_back(a, "worker stopping")
                self._slots.release()
                continue
            with self._lock:
                self._active[a.id] = a
            t = threading.Thread(target=self._attempt, args=(a,), name="jetflow-%s-%s" % (a.kind, a.id),
                                 daemon=True)
            t.start()

    # One attempt.

    def _attempt(self, a):
        t0 = time.monotonic()
        try:
            if isinstance(a, Job):
                self._run_job(a, t0)
            else:
                self._run_batch(a, t0)
        except BaseException:  # noqa: B902
            log.exception("%s %s: the worker failed running it", a.kind, a.id)
        finally:
            a._done = True
            a._disarm()
            if getattr(a, "_dir", None):
                shutil.rmtree(a._dir, ignore_errors=True)
            with self._lock:
                if self._active.get(a.id) is a:
                    del self._active[a.id]
                self._changed.notify_all()
            self._slots.release()

    def _run_job(self, job, t0):
        h = self._by_type.get(job.type)
        try:
            started = self._patch_job(job, {"state": "running"}, retries=3)
        except (errors.NotClaimant, errors.InvalidTransition, errors.NotFound) as e:
            log.info("job %s: not started, it moved on: %s", job.id, e)
            return
        job.attempt = started.get("attempts") or job.attempt
        job._set_deadline(started if started.get("deadline") else job.info, t0)
        job._arm()
        if h is None:
            self._conclude(job, Permanent("this worker has no handler of %s" % job.type, code="NO_HANDLER"))
            return
        job._dir = tempfile.mkdtemp(prefix="jetflow-%s-" % job.id, dir=self.work_dir)
        job.input_dir = pathlib.Path(job._dir, "in")
        job.output_dir = pathlib.Path(job._dir, "out")
        job.input_dir.mkdir()
        job.output_dir.mkdir()
        try:
            self._download_inputs(job)
        except (errors.NotClaimant, errors.InvalidTransition) as e:
            log.info("job %s: lost while downloading its inputs: %s", job.id, e)
            job._lose()
            return
        except Exception as e:  # noqa: BLE001
            self._conclude(job, JobError("INPUT", "input files: %s" % e))
            return
        self._conclude(job, self._call(h.fn, job))

    def _run_batch(self, b, t0):
        h = self._batches.get(b.type)
        b._set_deadline(b.info, t0)
        b._arm()
        if h is None:
            self._conclude(b, Permanent("this worker has no batch handler of %s" % b.type, code="NO_HANDLER"))
            return
        self._conclude(b, self._call(h.fn, b))

    def _call(self, fn, a):
        """Runs a handler, in the attempt's trace context (jetflow.tracing):
        its return value, or the exception it raised."""
        try:
            with _trace_of(a):
                if inspect.iscoroutinefunction(fn):
                    return _Returned(asyncio.run(fn(a)))
                return _Returned(fn(a))
        except (Exception, Cancelled) as e:  # noqa: BLE001 - a handler's error is the attempt's outcome
            try:
                e.__jetflow_tb__ = traceback.format_exc()
            except AttributeError:
                pass
            return e

    def _conclude(self, a, outcome):
        """Reports how the attempt ended, once (not if a deadline overrun or
        a shutdown reported already, nor if the worker lost the job)."""
        with a._lock:
            a._done = True
            if a._reported:
                return
            a._reported = True
            lost, reason = a._lost, a.cancel_reason
        if lost:
            log.info("%s %s: ended after the worker lost it; nothing reported", a.kind, a.id)
            self._count("dropped")
            return
        if reason == "shutdown":
            self._give_back(a, "worker stopping")
            return
        if isinstance(outcome, _Returned) and isinstance(outcome.value, FanOut):
            outcome = outcome.value
        if reason == "deadline":
            self._upload(a)
            self._report_outcome(a, "failed", a._timeout_error(), retryable=True)
            return
        if isinstance(outcome, _Returned) and isinstance(a, Batch):
            self._report_outcome(a, "succeeded", None)  # a batch has no result
            return
        if isinstance(outcome, _Returned):
            try:
                result = json.loads(dumps(outcome.value))
            except (TypeError, ValueError) as e:
                self._upload(a)
                self._report_outcome(a, "failed", {"code": "ERROR", "message": "handler result: %s" % e},
                                     retryable=False)
                return
            if not self._upload(a):
                return
            self._report_outcome(a, "succeeded", result)
            return
        if isinstance(outcome, RetryLater):
            self._report_outcome(a, "retry_later", outcome)
            return
        if isinstance(outcome, FanOut):
            self._report_outcome(a, "waiting", outcome)
            return
        self._upload(a)
        tb = getattr(outcome, "__jetflow_tb__", None)
        if isinstance(outcome, Permanent):
            err = {"code": outcome.code or "ERROR", "message": str(outcome) or outcome.code or "permanent failure"}
            self._report_outcome(a, "failed", err, retryable=False)
        elif isinstance(outcome, JobError):
            err = {"code": outcome.code, "message": outcome.message or outcome.code}
            if outcome.stack:
                err["stack"] = outcome.stack
            self._report_outcome(a, "failed", err, retryable=outcome.retryable)
        elif isinstance(outcome, Cancelled):
            self._report_outcome(a, "failed", {"code": "CANCELLED", "message": "the handler raised Cancelled"},
                                 retryable=False)
        else:
            err = {"code": getattr(outcome, "code", None) if isinstance(getattr(outcome, "code", None), str)
                   else "ERROR", "message": "%s: %s" % (type(outcome).__name__, outcome)}
            if tb:
                err["stack"] = tb
            self._report_outcome(a, "failed", err, retryable=True)

    def _report_outcome(self, a, state, value, retryable=None):
        """PATCH the outcome; a refusal because the attempt no longer holds
        its job is logged, not raised."""
        try:
            if isinstance(a, Batch):
                self._report_batch(a, state, value, retryable)
            else:
                self._report_job(a, state, value, retryable)
        except (errors.NotClaimant, errors.InvalidTransition, errors.NotFound) as e:
            log.info("%s %s: %s not reported, the attempt no longer holds it: %s", a.kind, a.id, state, e)
            self._count("dropped")
        except errors.JetflowError as e:
            log.error("%s %s: %s not reported: %s", a.kind, a.id, state, e)
            self._count("dropped")

    def _report_job(self, job, state, value, retryable):
        if state == "succeeded":
            try:
                self._patch_job(job, {"state": "succeeded", "result": value})
            except (errors.TooLarge, errors.InvalidInput) as e:
                # A result over the server's limit (16 MiB) fails the job for
                # good, as a Go handler's does, rather than leaving it to
                # its lease.
                if isinstance(e, errors.InvalidInput) and e.field != "result":
                    raise
                self._patch_job(job, {"state": "failed", "retryable": False, "error": {
                    "code": "RESULT_TOO_LARGE", "message": "handler result: %s" % e.detail}})
                state = "failed"
        elif state == "failed":
            self._patch_job(job, {"state": "failed", "error": _clip_error(value), "retryable": bool(retryable)})
        elif state == "retry_later":
            if self._features.get("retry_later") is False:
                self._retry_later_fallback(job, value)
                return
            try:
                body = {"state": "retry_later", "delay": value.delay_seconds}
                if value.reason:
                    body["reason"] = value.reason[:MAX_REASON]
                self._patch_job(job, body)
                self._features["retry_later"] = True
            except errors.InvalidInput as e:
                # A server without it refuses the field "delay" or the state.
                old = (("delay" in e.detail or "retry_later" in e.detail) if isinstance(e, errors.MalformedRequest)
                       else e.field == "state")
                if not old or self._features.get("retry_later"):
                    raise
                self._features["retry_later"] = False
                log.warning("the server takes no retry_later report (WIRE-19 §1): a retry is spent instead")
                self._retry_later_fallback(job, value)
                return
        elif state == "waiting":
            try:
                self._patch_job(job, {"state": "waiting", "fanout": value.body()})
            except errors.MalformedRequest as e:
                if "fanout" not in e.detail:
                    raise
                self._patch_job(job, {"state": "failed", "retryable": False, "error": {
                    "code": "FANOUT_UNSUPPORTED", "message": "the server takes no fan-out from HTTP workers: %s" % e.detail}})
                state = "failed"
        self._count(state)
        log.info("job %s: %s", job.id, state)

    def _retry_later_fallback(self, job, rl):
        self._patch_job(job, {"state": "failed", "retryable": True, "error": {
            "code": "RETRY_LATER", "message": "retry later (%s); this server spends a retry" % (rl.reason or "busy")}})
        self._count("failed")

    def _report_batch(self, b, state, value, retryable):
        body = {"worker_id": b.worker_id, "state": state}
        if state == "failed":
            body["error"] = _clip_error(value)
            body["retryable"] = bool(retryable)
        elif state == "retry_later":
            body["delay"] = value.delay_seconds
            if value.reason:
                body["reason"] = value.reason[:MAX_REASON]
        elif state == "waiting":
            body = {"worker_id": b.worker_id, "state": "failed", "retryable": False,
                    "error": {"code": "ERROR", "message": "a batch cannot fan out"}}
            state = "failed"
        elif state == "succeeded":
            pass
        self._send(lambda: self.client.request("PATCH", "/batches/" + _q(b.id), body), retries=3)
        self._count(state)
        log.info("batch %s (piece %s of %s): %s", b.id, b.piece, b.parent_id, state)

    def _give_back(self, a, reason):
        try:
            if isinstance(a, Batch):
                body = {"worker_id": a.worker_id, "state": "retry_later", "delay": 0, "reason": reason}
                self._send(lambda: self.client.request("PATCH", "/batches/" + _q(a.id), body), retries=2)
            else:
                self._patch_job(a, {"state": "queued", "reason": reason}, retries=2)
            self._count("given_back")
            log.info("%s %s: given back (%s)", a.kind, a.id, reason)
        except errors.JetflowError as e:
            log.info("%s %s: not given back: %s", a.kind, a.id, e)

    def _count(self, what):
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def _patch_job(self, job, body, retries=4):
        b = dict(body)
        b["worker_id"] = job.worker_id
        out = self._send(lambda: self.client.request("PATCH", "/jobs/" + _q(job.id), b), retries=retries)
        return out or {}

    def _send(self, fn, retries):
        """Calls fn, again after transient failures (the connection, 503,
        504, a lost write race). A call that failed on the way and is
        refused as a repeat (409) after a retry counts as done."""
        delay = 0.1
        for i in range(retries + 1):
            try:
                return fn()
            except (errors.ConnectionFailed, errors.Unavailable, errors.ServerTimeout, errors.Conflict,
                    errors.Overloaded, errors.InternalError) as e:
                if isinstance(e, errors.SchemaConflict) or i == retries:
                    raise
                log.debug("retrying after %s", e)
                time.sleep(delay)
                delay = min(delay * 3, 3.0)

    # Files.

    def _download_inputs(self, job):
        for f in job.files:
            name = f["name"]
            parts = name.split("/")
            if name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in name:
                raise ValueError("input %r: a name that leaves the job's directory" % name)
            dest = job.input_dir.joinpath(*parts)
            dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            q = urllib.parse.urlencode({"worker_id": job.worker_id})
            conn, res = self.client._t.open("GET", "/jobs/%s/inputs/%s?%s" % (
                _q(job.id), urllib.parse.quote(name, safe="/"), q), timeout=max(self.client.timeout, 300))
            h = hashlib.sha256()
            size = 0
            try:
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    while True:
                        chunk = res.read(64 * 1024)
                        if not chunk:
                            break
                        h.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            finally:
                conn.close()
            want = (f.get("digest") or "").partition("=")[2].rstrip("=")
            got = base64.urlsafe_b64encode(h.digest()).decode().rstrip("=")
            if f.get("size") is not None and size != f["size"]:
                raise ValueError("input %r: %d bytes, the job recorded %d" % (name, size, f["size"]))
            if want and got != want:
                raise ValueError("input %r: its digest is not the one the job recorded" % name)
            job.inputs[name] = dest

    def _upload(self, a):
        """Zips and uploads what the handler left in output_dir (if
        anything) as the result archive. False if the attempt is lost."""
        if not isinstance(a, Job) or a.output_dir is None:
            return True
        entries = []
        for root, dirs, names in os.walk(a.output_dir):
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
            for n in sorted(names):
                p = os.path.join(root, n)
                if os.path.islink(p) or not os.path.isfile(p):
                    continue
                entries.append((p, os.path.relpath(p, a.output_dir).replace(os.sep, "/")))
        if not entries:
            return True
        zpath = os.path.join(a._dir, "result.zip")
        with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
            for p, arc in entries:
                z.write(p, arc)
        q = urllib.parse.urlencode({"worker_id": a.worker_id})

        def put():
            with open(zpath, "rb") as f:
                return self.client.request("PUT", "/jobs/%s/result?%s" % (_q(a.id), q), f,
                                           headers={"Content-Type": "application/zip"},
                                           timeout=max(self.client.timeout, 300))
        try:
            self._send(put, retries=2)
            return True
        except (errors.NotClaimant, errors.InvalidTransition, errors.NotFound) as e:
            log.info("job %s: archive not stored, the attempt no longer holds the job: %s", a.id, e)
            a._lost = True
            return False
        except errors.JetflowError as e:
            log.error("job %s: archive not stored: %s", a.id, e)
            return True

    # Stopping.

    def _shutdown(self, grace):
        self._stop.set()
        call = self._claim_call
        if call is not None:
            call.abort()
        for t in self._threads:
            if t.name == "jetflow-claim" and t is not threading.current_thread():
                t.join(self.claim_wait + 20)
        end = time.monotonic() + max(0.0, grace)
        with self._lock:
            while self._active and not self._hard.is_set():
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.1))
            left_over = list(self._active.values())
        for a in left_over:
            a._cancel("shutdown")
            with a._lock:
                if a._reported or a._lost:
                    continue
                a._reported = True
            self._give_back(a, "worker stopping")
        self._hb_stop.set()
        call = self._hb_call
        if call is not None:
            call.abort()
        for t in self._threads:
            if t.name == "jetflow-heartbeat":
                t.join(20)
        try:
            out = self.client.request("DELETE", "/workers/" + _q(self.id))
            log.info("worker %s unregistered (%d jobs released)", self.id, len(out.get("released") or []))
        except errors.JetflowError as e:
            log.warning("unregister: %s", e)
        self._stopped.set()


def _trace_of(a):
    """The attempt's trace context made current; none (cleared) when the
    server sent one that is not W3C."""
    tp = a.traceparent
    if tp is not None:
        try:
            tracing._check(tp, a.tracestate)
        except ValueError:
            log.warning("%s %s: ignoring trace context %r", a.kind, a.id, tp)
            tp = None
    return tracing.use(tp, a.tracestate if tp else None)


class _Returned:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _clip_error(e):
    e = dict(e)
    e["code"] = str(e.get("code") or "ERROR")[:128]
    msg = str(e.get("message") or e["code"])
    e["message"] = msg.encode("utf-8")[:MAX_MESSAGE].decode("utf-8", "ignore")
    if e.get("stack"):
        e["stack"] = str(e["stack"]).encode("utf-8")[-MAX_STACK:].decode("utf-8", "ignore")
    return e


def _q(s):
    return urllib.parse.quote(s, safe="")
