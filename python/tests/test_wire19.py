"""The WIRE-19 features (retry-later, fan-out, batches, heartbeat long
polls, deadlines) and worker events: each test skips with "server lacks
<feature>" on a server that answers the feature's probe the old way, and
must pass on one that has it."""

import datetime
import threading
import time

import jetflow
from jetflow.worker import _parse_time
from tests.support import ServerTest, lacks, requires, unique, wait_until

FANIN = ("job.fanin", "job.progress")


def _secs(a, b):
    return (_parse_time(b) - _parse_time(a)).total_seconds()


class RetryLaterTest(ServerTest):
    @requires("retry_later")
    def test_retry_later_spends_no_retry(self):
        c = self.client
        t = unique("later")
        w = self.worker()
        attempts = []

        @w.task(t)
        def run(job):
            attempts.append(job.attempt)
            if len(attempts) == 1:
                raise jetflow.RetryLater(0, "GPU busy")
            return "ran"
        w.start()
        job = c.submit(t, max_retries=0)
        d = self.wait_done(job.id)
        self.assertEqual((d.state, d.result, d.attempts, d.retries), ("succeeded", "ran", 2, 0))
        self.assertEqual(attempts, [1, 2])
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.retry_later",
                                   "job.claimed", "job.started", "job.succeeded"])
        ev = c.events(job.id)[3]
        self.assertEqual((ev.message, ev["from"], ev.to), ("GPU busy", "running", "queued"))
        self.wait_count(w, "retry_later", 1)

    @requires("retry_later")
    def test_retry_later_after_a_delay(self):
        c = self.client
        t = unique("laterdelay")
        w = self.worker()
        n = []

        @w.task(t)
        def run(job):
            n.append(1)
            if len(n) == 1:
                raise jetflow.RetryLater(1.5, "GPU busy")
            return "ran"
        w.start()
        job = c.submit(t, max_retries=0)
        wait_until(lambda: "job.retry_later" in [e.type for e in c.events(job.id)], what="job.retry_later")
        self.assertEqual(c.get(job.id).state, "scheduled")
        d = self.wait_done(job.id)
        self.assertEqual((d.state, d.attempts, d.retries), ("succeeded", 2, 0))
        evs = c.events(job.id)
        self.assertEqual([e.type for e in evs], ["job.submitted", "job.claimed", "job.started", "job.retry_later",
                                                 "job.due", "job.claimed", "job.started", "job.succeeded"])
        self.assertEqual((evs[3].to, evs[3].message), ("scheduled", "GPU busy"))
        self.assertAlmostEqual(_secs(evs[3].time, evs[3].run_at), 1.5, delta=0.2)
        self.assertGreaterEqual(_secs(evs[3].time, evs[6].time), 1.4)

    @requires("retry_later")
    def test_retry_later_report(self):
        c = self.client
        t = unique("laterraw")
        job = c.submit(t, max_retries=2)
        wk = c.request("POST", "/workers", {"name": "raw", "types": [t]})
        self.addCleanup(c.request, "DELETE", "/workers/" + wk["id"])
        self.assertEqual(c.request("POST", "/tasks/claim", {"worker_id": wk["id"], "wait": 5})["job"]["id"], job.id)
        with self.assertRaises(jetflow.InvalidTransition) as cm:  # only from running
            c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "retry_later", "delay": 0})
        self.assertEqual(cm.exception.state, "claimed")
        c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "running"})
        with self.assertRaises(jetflow.InvalidInput) as cm:
            c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "retry_later"})
        self.assertEqual(cm.exception.field, "delay")
        with self.assertRaises(jetflow.InvalidInput) as cm:
            c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "retry_later", "delay": 0,
                                                   "reason": "x" * 1025})
        self.assertEqual(cm.exception.field, "reason")
        self.assertEqual([e.type for e in c.events(job.id)], ["job.submitted", "job.claimed", "job.started"])
        got = c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "retry_later",
                                                      "delay": "1h", "reason": "busy"})
        self.assertEqual((got["state"], got["retries"]), ("scheduled", 0))
        c.cancel(job.id)


class FanOutTest(ServerTest):
    @requires("fanout")
    def test_children_fan_in(self):
        c = self.client
        t = unique("coord")
        ct = unique("kid")
        w = self.worker(concurrency=3)
        coordinated = []

        @w.task(t)
        def coordinator(job):
            coordinated.append(job.id)
            return jetflow.FanOut(children=[jetflow.FanOut.child(ct, {"n": i}, max_retries=0)
                                            for i in range(1, 4)])

        @w.task(ct)
        def kid(job):
            return job.payload["n"] * 10
        w.start()
        parent = c.submit(t)
        d = self.wait_done(parent.id)
        self.assertEqual((d.state, d.result), ("succeeded", {"total": 3, "succeeded": 3, "failed": 0, "cancelled": 0}))
        self.assertEqual({k: d.fanout[k] for k in ("kind", "total", "succeeded", "failed", "cancelled", "finished",
                                                    "policy")},
                         {"kind": "children", "total": 3, "succeeded": 3, "failed": 0, "cancelled": 0,
                          "finished": 3, "policy": "all"})
        self.assertEqual(coordinated, [parent.id])
        kids = list(c.children(parent.id))
        self.assertEqual(sorted(k.result for k in kids), [10, 20, 30])
        self.assertEqual({(k.parent_id, k.type, k.state, k.max_retries) for k in kids},
                         {(parent.id, ct, "succeeded", 0)})
        self.assertEvents(parent.id, ["job.submitted", "job.claimed", "job.started", "job.waiting",
                                      "job.succeeded"], ignore=FANIN)
        self.wait_count(w, "waiting", 1)

    @requires("fanout")
    def test_tolerate_policy(self):
        c = self.client
        t = unique("coordtol")
        ct = unique("kidtol")
        w = self.worker(concurrency=2)

        @w.task(t)
        def coordinator(job):
            raise jetflow.FanOut(children=[{"type": ct, "payload": i, "max_retries": 0} for i in range(4)],
                                 failure_policy="tolerate", max_failure_ratio=0.5)

        @w.task(ct)
        def kid(job):
            if job.payload == 2:
                raise jetflow.Permanent("piece two is bad")
            return job.payload
        w.start()
        parent = c.submit(t)
        d = self.wait_done(parent.id)
        self.assertEqual(d.state, "succeeded")
        self.assertEqual({k: d.result[k] for k in ("total", "succeeded", "failed", "cancelled")},
                         {"total": 4, "succeeded": 3, "failed": 1, "cancelled": 0})
        self.assertEqual((d.fanout["policy"], d.fanout["max_failure_ratio"]), ("tolerate", 0.5))
        self.assertEqual(sorted(k.state for k in c.children(parent.id)), ["failed", "succeeded", "succeeded",
                                                                          "succeeded"])

    @requires("fanout")
    def test_fanout_report_is_checked(self):
        c = self.client
        t = unique("coordraw")
        job = c.submit(t)
        wk = c.request("POST", "/workers", {"name": "raw", "types": [t]})
        self.addCleanup(c.request, "DELETE", "/workers/" + wk["id"])
        c.request("POST", "/tasks/claim", {"worker_id": wk["id"], "wait": 5})
        c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "running"})
        for fanout in ({"children": [{"type": "a"}], "batches": {"type": "b", "items": [1]}}, {"children": []}):
            with self.assertRaises(jetflow.InvalidInput):
                c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "waiting", "fanout": fanout})
        self.assertEqual([e.type for e in c.events(job.id)], ["job.submitted", "job.claimed", "job.started"])
        got = c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "waiting",
                                                      "fanout": {"children": [{"type": unique("nobody")}]}})
        self.assertEqual((got["state"], got["fanout"]["total"]), ("waiting", 1))
        c.cancel(job.id)


class BatchesTest(ServerTest):
    @requires("fanout", "batches")
    def test_batches_fan_in(self):
        c = self.client
        t = unique("embed")
        bt = unique("embedbatch")
        w = self.worker(concurrency=3)
        seen = {}
        lock = threading.Lock()

        @w.task(t)
        def coordinator(job):
            items = [{"seq": "s%d" % i} for i in range(5)]
            return jetflow.FanOut(batches=jetflow.Batches(bt, items, max_retries=2, timeout=30))

        @w.batch(bt)
        def embed(batch):
            with lock:
                first = batch.piece not in seen
                seen.setdefault(batch.piece, []).append((batch.payload, batch.parent_id, batch.type))
            if batch.piece == 2 and first:
                raise jetflow.RetryLater(0, "GPU busy")
            batch.check()
        w.start()
        self.assertEqual(w.registration["batch_types"], [bt])
        parent = c.submit(t)
        d = self.wait_done(parent.id)
        self.assertEqual((d.state, d.result), ("succeeded", {"total": 5, "succeeded": 5, "failed": 0, "cancelled": 0}))
        self.assertEqual((d.fanout["kind"], d.fanout["batch_type"], d.fanout["total"]), ("batches", bt, 5))
        self.assertEqual(sorted(seen), [1, 2, 3, 4, 5])
        for piece, runs in seen.items():
            self.assertEqual(runs[-1], ({"seq": "s%d" % (piece - 1)}, parent.id, bt))
            self.assertEqual(len(runs), 2 if piece == 2 else 1)
        self.assertEqual(list(c.children(parent.id)), [])  # batches have no job records
        self.assertEvents(parent.id, ["job.submitted", "job.claimed", "job.started", "job.waiting",
                                      "job.succeeded"], ignore=FANIN)

    @requires("fanout", "batches")
    def test_failed_batch_fails_the_parent(self):
        c = self.client
        t = unique("embedf")
        bt = unique("embedfbatch")
        w = self.worker(concurrency=2)
        runs = []
        lock = threading.Lock()

        @w.task(t)
        def coordinator(job):
            return jetflow.FanOut(batches=jetflow.Batches(bt, [1, 2, 3], max_retries=0))

        @w.batch(bt)
        def embed(batch):
            with lock:
                runs.append(batch.payload)
                first = runs.count(2) == 1
            if batch.payload == 2 and first:
                raise jetflow.JobError("OOM", "out of GPU memory", retryable=False)
        w.start()
        parent = c.submit(t)
        d = self.wait_done(parent.id)
        self.assertEqual((d.state, d.error["code"]), ("failed", "FANOUT_FAILED"))
        self.assertEqual((d.fanout["succeeded"], d.fanout["failed"], d.fanout["cancelled"]), (2, 1, 0))
        self.assertIn("out of GPU memory", d.error["message"])

        # Only the failed batch runs again; the two others are carried over.
        again = c.retry(parent.id, failed_pieces=True)
        self.assertEqual((again.retry_of, again.failed_pieces), (parent.id, True))
        d2 = self.wait_done(again.id)
        self.assertEqual((d2.state, d2.result), ("succeeded", {"total": 3, "succeeded": 3, "failed": 0, "cancelled": 0}))
        with lock:
            self.assertEqual(sorted(runs), [1, 2, 2, 3])
        with self.assertRaises(jetflow.InvalidInput) as e:
            c.retry(again.id, failed_pieces=True)  # every piece succeeded
        self.assertIn("failed_pieces", str(e.exception))


class HeartbeatWaitTest(ServerTest):
    @requires("heartbeat_wait")
    def test_heartbeat_long_poll(self):
        c = self.client
        t = unique("hbwait")
        job = c.submit(t)
        wk = c.request("POST", "/workers", {"name": "raw", "types": [t]})
        self.addCleanup(c.request, "DELETE", "/workers/" + wk["id"])
        self.assertEqual(c.request("POST", "/tasks/claim", {"worker_id": wk["id"], "wait": 5})["job"]["id"], job.id)
        t0 = time.monotonic()
        hb = c.request("POST", "/workers/%s/heartbeat" % wk["id"], {"wait": 1}, timeout=20)
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)
        self.assertEqual((hb["jobs"], hb["lost"]), ([job.id], []))
        out = {}

        def beat():
            t0 = time.monotonic()
            out["hb"] = c.request("POST", "/workers/%s/heartbeat" % wk["id"], {"wait": 20}, timeout=40)
            out["took"] = time.monotonic() - t0
        b = threading.Thread(target=beat)
        b.start()
        time.sleep(0.3)  # the heartbeat is held by the server (nothing is lost yet)
        self.assertNotIn("hb", out)
        t0 = time.monotonic()
        c.cancel(job.id)
        b.join(10)
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertEqual((out["hb"]["lost"], out["hb"]["jobs"]), ([job.id], []))
        with self.assertRaises(jetflow.InvalidInput) as cm:
            c.request("POST", "/workers/%s/heartbeat" % wk["id"], {"wait": -1})
        self.assertEqual(cm.exception.field, "wait")

    @requires("heartbeat_wait")
    def test_worker_hears_cancel_at_once(self):
        c = self.client
        t = unique("hbcancel")
        w = self.worker()
        seen = {}

        @w.task(t)
        def run(job):
            try:
                job.sleep(30)
            except jetflow.Cancelled as e:
                seen["at"], seen["reason"] = time.monotonic(), e.reason
                raise
        w.start()
        job = c.submit(t)
        self.wait_state(job.id, "running")
        wait_until(lambda: w.heartbeat_mode == "long-poll", what="heartbeats long-polled")
        n = w.heartbeats  # one more answered: the one in flight now knows the job
        wait_until(lambda: w.heartbeats > n, what="a heartbeat answered")
        t0 = time.monotonic()
        c.cancel(job.id)
        wait_until(lambda: "at" in seen, timeout=5, what="the cancel heard")
        self.assertLess(seen["at"] - t0, 0.5)
        self.assertEqual(seen["reason"], "cancelled")
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.cancelled"])


class ServerDeadlineTest(ServerTest):
    @requires("deadline")
    def test_claim_and_start_carry_the_deadline(self):
        c = self.client
        t = unique("dl")
        job = c.submit(t, timeout=30)
        wk = c.request("POST", "/workers", {"name": "raw", "types": [t]})
        self.addCleanup(c.request, "DELETE", "/workers/" + wk["id"])
        now = datetime.datetime.now(datetime.timezone.utc)
        got = c.request("POST", "/tasks/claim", {"worker_id": wk["id"], "wait": 5})["job"]
        self.assertEqual(got["timeout_seconds"], 30)
        self.assertAlmostEqual((_parse_time(got["deadline"]) - now).total_seconds(), 30, delta=2)
        run = c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "running"})
        self.assertEqual(run["timeout_seconds"], 30)
        self.assertAlmostEqual(_secs(run["started_at"], run["deadline"]), 30, delta=0.05)
        self.assertEqual(c.get(job.id).deadline, run["deadline"])  # every read of a held job shows it
        c.cancel(job.id)

    @requires("deadline")
    def test_engine_ends_a_silent_attempt(self):
        c = self.client
        t = unique("dlsilent")
        job = c.submit(t, timeout=1, max_retries=0)
        wk = c.request("POST", "/workers", {"name": "raw", "types": [t]})
        self.addCleanup(c.request, "DELETE", "/workers/" + wk["id"])
        c.request("POST", "/tasks/claim", {"worker_id": wk["id"], "wait": 5})
        c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "running"})
        t0 = time.monotonic()
        stop = threading.Event()

        lost = []

        def beat():  # the worker is alive: only the deadline ends the attempt
            while not stop.wait(0.5):
                lost.extend(c.request("POST", "/workers/%s/heartbeat" % wk["id"])["lost"])
        b = threading.Thread(target=beat, daemon=True)
        b.start()
        self.addCleanup(stop.set)
        d = c.wait(job.id, timeout=15)
        self.assertLess(time.monotonic() - t0, 8)
        self.assertEqual((d.state, d.error["code"], d.attempts), ("failed", "TIMEOUT", 1))
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.failed"])
        with self.assertRaises((jetflow.NotClaimant, jetflow.InvalidTransition)):
            c.request("PATCH", "/jobs/" + job.id, {"worker_id": wk["id"], "state": "succeeded", "result": 1})
        stop.set()
        b.join(5)
        lost.extend(c.request("POST", "/workers/%s/heartbeat" % wk["id"])["lost"])
        self.assertEqual(lost, [job.id])

    @requires("deadline")
    def test_worker_takes_the_servers_deadline(self):
        c = self.client
        t = unique("dlworker")
        w = self.worker()
        seen = {}

        @w.task(t)
        def run(job):
            seen["deadline"] = job.deadline
            return "ok"
        w.start()
        job = c.submit(t, timeout=20)
        d = self.wait_done(job.id)
        self.assertAlmostEqual((seen["deadline"] - _parse_time(d.started_at)).total_seconds(), 20, delta=0.05)


class WorkerEventsTest(ServerTest):
    @requires("worker_events")
    def test_job_event(self):
        c = self.client
        t = unique("ev")
        w = self.worker()

        @w.task(t)
        def run(job):
            job.event("page.done", "page 1 of 2", level="warning", fields={"page": 1, "urls": ["a"]})
            job.event("long", "x" * 5000)  # a message is cut at 4096 bytes
            with self.assertRaises(jetflow.InvalidInput) as cm:
                job.event("n" * 129)
            return cm.exception.field
        w.start()
        job = c.submit(t)
        d = self.wait_done(job.id)
        self.assertEqual((d.state, d.result), ("succeeded", "event.name"))
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.event", "job.event",
                                   "job.succeeded"])
        evs = c.events(job.id)
        self.assertEqual((evs[3].name, evs[3].message, evs[3].level, evs[3].fields),
                         ("page.done", "page 1 of 2", "warning", {"page": 1, "urls": ["a"]}))
        self.assertEqual((evs[4].name, evs[4].message, evs[4].level), ("long", "x" * 4096, "info"))


class OlderServerTest(ServerTest):
    """What the worker does on a server without a WIRE-19 feature."""

    @lacks("retry_later")
    def test_retry_later_spends_a_retry(self):
        c = self.client
        t = unique("oldlater")
        w = self.worker()
        n = []

        @w.task(t)
        def run(job):
            n.append(1)
            if len(n) == 1:
                raise jetflow.RetryLater(0, "GPU busy")
            return "ran"
        w.start()
        job = c.submit(t, max_retries=1, backoff=0)
        d = self.wait_done(job.id)
        self.assertEqual((d.state, d.attempts, d.retries), ("succeeded", 2, 1))
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.retry_scheduled",
                                   "job.claimed", "job.started", "job.succeeded"])
        self.assertEqual(c.events(job.id)[3].error["code"], "RETRY_LATER")

    @lacks("fanout")
    def test_fanout_fails_the_job(self):
        c = self.client
        t = unique("oldfan")
        w = self.worker()
        w.task(t)(lambda job: jetflow.FanOut(children=[{"type": "x"}]))
        w.start()
        job = c.submit(t, max_retries=3)
        d = self.wait_done(job.id)
        self.assertEqual((d.state, d.error["code"], d.attempts), ("failed", "FANOUT_UNSUPPORTED", 1))

    @lacks("batches")
    def test_batch_handlers_not_served(self):
        t = unique("oldbatch")
        w = self.worker()
        w.batch(unique("b"))(lambda batch: None)
        with self.assertRaises(jetflow.JetflowError) as cm:
            w.start()
        self.assertIn("no batches", str(cm.exception))
        w2 = self.worker()
        w2.batch(unique("b"))(lambda batch: None)
        w2.task(t)(lambda job: "ran")
        w2.start()
        self.assertNotIn("batch_types", w2.registration)
        job = self.client.submit(t)
        self.assertEqual(self.wait_done(job.id).result, "ran")

    @lacks("worker_events")
    def test_job_event_logged_here(self):
        t = unique("oldev")
        w = self.worker()

        @w.task(t)
        def run(job):
            with self.assertLogs("jetflow.job", "WARNING") as logs:
                job.event("page.done", "page 1", level="warning", fields={"page": 1})
            return logs.output
        w.start()
        job = self.client.submit(t)
        d = self.wait_done(job.id)
        self.assertEqual(d.result, ['WARNING:jetflow.job:job %s: page.done page 1 {"page": 1}' % job.id])
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.succeeded"])
