"""Helpers of the tests: the servers under test (JETFLOW_URL, and
JETFLOW_AUTH_URL with JETFLOW_ADMIN_TOKEN for access control), waiting for
conditions with a deadline, and probes of the WIRE-19 features the server
may not have yet (tests of those skip with "server lacks <feature>")."""

import functools
import logging
import os
import threading
import time
import unittest
import uuid

import jetflow

URL = os.environ.get("JETFLOW_URL")
AUTH_URL = os.environ.get("JETFLOW_AUTH_URL")
ADMIN_TOKEN = os.environ.get("JETFLOW_ADMIN_TOKEN")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

if os.environ.get("JETFLOW_TEST_LOG"):
    logging.basicConfig(level=logging.DEBUG, format="%(relativeCreated)6d %(threadName)s %(name)s: %(message)s")

FAKE_JOB = "01JAAAAAAAAAAAAAAAAAAAAAAA"
FAKE_WORKER = "wk-01JAAAAAAAAAAAAAAAAAAAAAAA"
TERMINAL = ("succeeded", "failed", "cancelled")


def unique(prefix="t"):
    """A fresh name (a job type of one test: no other test's worker claims it)."""
    return "%s.%s" % (prefix, uuid.uuid4().hex[:12])


def wait_until(fn, timeout=15.0, interval=0.02, what="the condition"):
    """Polls fn until it returns something truthy, and returns it; fails
    the test when timeout passes."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() >= end:
            raise AssertionError("%s did not hold within %gs (last: %r)" % (what, timeout, v))
        time.sleep(interval)


def event_types(client, job_id):
    return [e.type for e in client.events(job_id)]


# Probes of WIRE-19 features, each asked once.

_features = {}
_flock = threading.Lock()


def _probe_retry_later(c):
    try:
        c.request("PATCH", "/jobs/" + FAKE_JOB, {"worker_id": FAKE_WORKER, "state": "retry_later", "delay": 0})
    except jetflow.MalformedRequest as e:  # the old server: an unknown field "delay"
        return "delay" not in e.detail and "retry_later" not in e.detail
    except jetflow.InvalidInput as e:  # or a state it does not know
        return e.field != "state"
    except jetflow.JetflowError:
        return True
    return True


def _probe_fanout(c):
    try:
        c.request("PATCH", "/jobs/" + FAKE_JOB, {"worker_id": FAKE_WORKER, "state": "waiting",
                                                "fanout": {"children": [{"type": "probe.child"}]}})
    except jetflow.MalformedRequest as e:
        return "fanout" not in e.detail
    except jetflow.JetflowError:
        return True
    return True


def _probe_batches(c):
    try:
        rec = c.request("POST", "/workers", {"name": "probe", "types": [], "batch_types": ["bad name"]})
    except jetflow.MalformedRequest as e:
        return "batch_types" not in e.detail
    except jetflow.JetflowError:
        return True
    c.request("DELETE", "/workers/" + rec["id"])  # taken as it was: still a server with batches
    return True


def _probe_heartbeat_wait(c):
    rec = c.request("POST", "/workers", {"name": "probe", "types": [unique("probe.hb")]})
    try:
        t0 = time.monotonic()
        c.request("POST", "/workers/%s/heartbeat" % rec["id"], {"wait": 1}, timeout=30)
        return time.monotonic() - t0 >= 0.8
    finally:
        c.request("DELETE", "/workers/" + rec["id"])


def _probe_deadline(c):
    t = unique("probe.deadline")
    job = c.submit(t, timeout=30, max_retries=0)
    rec = c.request("POST", "/workers", {"name": "probe", "types": [t]})
    try:
        got = c.request("POST", "/tasks/claim", {"worker_id": rec["id"], "wait": 10}, timeout=30)["job"]
        return got is not None and "deadline" in got
    finally:
        c.request("DELETE", "/workers/" + rec["id"])
        c.cancel(job.id)


def _probe_worker_events(c):
    try:
        c.request("PATCH", "/jobs/" + FAKE_JOB, {"worker_id": FAKE_WORKER, "event": {"name": "probe"}})
    except jetflow.MalformedRequest as e:
        return "event" not in e.detail
    except jetflow.JetflowError:
        return True
    return True


PROBES = {
    "retry_later": _probe_retry_later,  # WIRE-19 §1
    "fanout": _probe_fanout,  # §2
    "batches": _probe_batches,  # §3
    "heartbeat_wait": _probe_heartbeat_wait,  # §4
    "deadline": _probe_deadline,  # §5
    "worker_events": _probe_worker_events,  # job.event from an HTTP worker (not in WIRE-19)
}


def has(feature):
    with _flock:
        if feature not in _features:
            _features[feature] = PROBES[feature](jetflow.Client(URL))
        return _features[feature]


def requires(*features):
    """Skips the test with "server lacks <feature>" unless the server has
    every feature (probed once, on the first test that asks)."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kw):
            for f in features:
                if not has(f):
                    raise unittest.SkipTest("server lacks %s" % f)
            return fn(self, *args, **kw)
        return wrapper
    return deco


def lacks(*features):
    """Runs the test only on a server without the features (it checks what
    the package does there); skips with "server has <feature>" otherwise."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kw):
            for f in features:
                if has(f):
                    raise unittest.SkipTest("server has %s" % f)
            return fn(self, *args, **kw)
        return wrapper
    return deco


class ServerTest(unittest.TestCase):
    """A test against the open server (JETFLOW_URL)."""

    def setUp(self):
        if not URL:
            self.skipTest("JETFLOW_URL is not set (run through tests/python)")
        self.client = jetflow.Client(URL)

    def worker(self, concurrency=1, start=True, **kw):
        """A Worker of this test, stopped when it ends."""
        kw.setdefault("name", self.id().rsplit(".", 1)[-1][:60])
        kw.setdefault("claim_wait", 5)
        w = jetflow.Worker(URL, concurrency=concurrency, **kw)
        self.addCleanup(self._stop, w)
        return w

    def _stop(self, w):
        if w.id is not None:
            w.stop(grace=0)

    def wait_count(self, w, what, n):
        """Waits until the worker counted n reports of what (it counts once
        the server answered the report, a moment after the job changed)."""
        wait_until(lambda: w.counts.get(what, 0) >= n, what="%d %s reports" % (n, what))
        self.assertEqual(w.counts.get(what, 0), n, "%s reports" % what)

    def wait_state(self, job_id, *states, timeout=15.0):
        """Waits until the job is in one of states and returns it."""
        last = [None]

        def check():
            j = self.client.get(job_id)
            last[0] = j.state
            return j if j.state in states else None
        try:
            return wait_until(check, timeout, what="job %s in %s" % (job_id, "/".join(states)))
        except AssertionError:
            raise AssertionError("job %s is %s, not %s, after %gs; events %s" % (
                job_id, last[0], "/".join(states), timeout, event_types(self.client, job_id))) from None

    def wait_done(self, job_id, timeout=15.0):
        return self.client.wait(job_id, timeout=timeout)

    def assertEvents(self, job_id, want, ignore=()):
        got = [t for t in event_types(self.client, job_id) if t not in ignore]
        self.assertEqual(got, list(want), "events of job %s" % job_id)
