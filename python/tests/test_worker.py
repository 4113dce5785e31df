"""The Worker against a real server: handlers, outcomes, concurrency,
cancellation, deadlines, graceful stop, registered types."""

import threading
import time

import jetflow
from tests.support import ServerTest, has, unique, wait_until

DONE = ["job.submitted", "job.claimed", "job.started", "job.succeeded"]


class RunTest(ServerTest):
    def test_job_result_progress_and_fields(self):
        t = unique("run")
        w = self.worker()
        got = {}

        @w.task(t)
        def run(job):
            got.update(id=job.id, type=job.type, queue=job.queue, namespace=job.namespace, payload=job.payload,
                       attempt=job.attempt, deadline=job.deadline, left=job.time_left(),
                       traceparent=job.traceparent, cancelled=job.cancelled.is_set(), inputs=job.inputs)
            job.progress(3, 4, "almost")
            job.check()
            return {"echo": job.payload["x"] * 2}
        w.start()
        self.assertTrue(w.id.startswith("wk-"))
        job = self.client.submit(t, {"x": 21}, timeout=60, queue="py-run")
        done = self.wait_done(job.id)
        self.assertEqual((done.state, done.result, done.attempts, done.retries, done.error),
                         ("succeeded", {"echo": 42}, 1, 0, None))
        self.assertEqual(done.progress["current"], 3)
        self.assertEqual(got["id"], job.id)
        self.assertEqual((got["type"], got["queue"], got["namespace"], got["payload"], got["attempt"]),
                         (t, "py-run", "default", {"x": 21}, 1))
        self.assertEqual((got["cancelled"], got["inputs"], got["traceparent"]), (False, {}, job.get("traceparent")))
        self.assertGreater(got["left"], 55)
        self.assertLessEqual(got["left"], 60)
        self.assertIsNotNone(got["deadline"].tzinfo)
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.progress", "job.succeeded"])
        ev = self.client.events(job.id)[3]
        self.assertEqual(ev.progress, {"current": 3, "total": 4, "message": "almost"})
        self.wait_count(w, "succeeded", 1)
        self.assertIn(w.id, [x.id for x in self.client.workers()])

    def test_workflow_steps_see_their_inputs(self):
        c = self.client
        t = unique("wf")
        w = self.worker()
        seen = {}

        @w.task(t + ".fetch")
        def fetch(job):
            seen["fetch"] = (job.step, job.depends_on)
            return {"n": job.payload["n"] * 2}

        @w.task(t + ".parse")
        def parse(job):
            seen["parse"] = (job.step, job.depends_on, job.output("fetch"), job.outputs())
            try:
                job.output("nope")
            except jetflow.NotAStep as e:
                seen["nope"] = str(e)
            return {"sum": job.output("fetch")["n"] + 1}
        w.start()
        wf = c.submit_workflow([
            {"name": "fetch", "type": t + ".fetch", "payload": {"n": 20}},
            {"name": "parse", "type": t + ".parse", "depends_on": ["fetch"]},
        ], name="py", idempotency_key=t)
        self.assertEqual((wf.created, sorted(wf.steps)), (True, ["fetch", "parse"]))
        done = self.wait_done(wf.steps["parse"])
        self.assertEqual((done.state, done.result), ("succeeded", {"sum": 41}))
        self.assertEqual(seen["fetch"], ("fetch", []))
        self.assertEqual(seen["parse"], ("parse", ["fetch"], {"n": 40}, {"fetch": {"n": 40}}))
        self.assertIn("nope", seen["nope"])
        wait_until(lambda: c.get_workflow(wf.id).state == "succeeded", what="the workflow succeeded")
        again = c.submit_workflow([{"name": "x", "type": t + ".fetch"}], idempotency_key=t)
        self.assertEqual((again.id, again.created), (wf.id, False))
        with self.assertRaises(jetflow.InvalidWorkflow) as cm:
            c.submit_workflow([{"name": "a", "type": t + ".fetch", "depends_on": ["b"]},
                               {"name": "b", "type": t + ".fetch", "depends_on": ["a"]}])
        self.assertEqual(cm.exception.status, 400)

    def test_retry_workflow_runs_only_what_failed(self):
        c = self.client
        t = unique("wfretry")
        w = self.worker()
        runs = {"a": 0, "b": 0}

        @w.task(t + ".a")
        def a(job):
            runs["a"] += 1
            return {"a": 1}

        @w.task(t + ".b")
        def b(job):
            runs["b"] += 1
            if runs["b"] == 1:
                raise jetflow.Permanent("b breaks the first time", code="FIRST")
            return {"b": job.output("a")["a"] + 1}
        w.start()
        wf = c.submit_workflow([
            {"name": "a", "type": t + ".a"},
            {"name": "b", "type": t + ".b", "depends_on": ["a"], "max_retries": 0},
        ], name="py-retry")
        wait_until(lambda: c.get_workflow(wf.id).state == "failed", what="the workflow failed")
        again = c.retry_workflow(wf.id)
        self.assertNotEqual(again.id, wf.id)
        self.assertEqual(again.steps["a"], wf.steps["a"])  # carried over: the same job
        self.assertNotEqual(again.steps["b"], wf.steps["b"])
        wait_until(lambda: c.get_workflow(again.id).state == "succeeded", what="the retry succeeded")
        got = c.get_workflow(again.id)
        self.assertEqual(got.retry_of, wf.id)
        steps = {s["name"]: s for s in got.steps}
        self.assertEqual((steps["a"]["status"], steps["a"].get("carried")), ("succeeded", True))
        self.assertEqual((steps["b"]["status"], steps["b"].get("carried", False)), ("succeeded", False))
        self.assertEqual(runs, {"a": 1, "b": 2})
        self.assertEqual(self.wait_done(again.steps["b"]).result, {"b": 2})
        # The same retry again is the same run; a workflow that succeeded
        # is not retried.
        self.assertEqual(c.retry_workflow(wf.id).id, again.id)
        with self.assertRaises(jetflow.InvalidTransition):
            c.retry_workflow(again.id)

    def test_large_inputs_read_by_reference(self):
        # Two dependencies of 600 KB each: the claimed job carries the
        # first inline and names the second by path (inputs past 1 MiB
        # together), which job.output reads from the server.
        c = self.client
        t = unique("wfbig")
        w = self.worker()
        seen = {}

        @w.task(t + ".big")
        def big(job):
            return {"s": job.payload["c"] * 600000}

        @w.task(t + ".join")
        def join(job):
            seen["inline"] = sorted(job.info.get("inputs") or {})
            seen["refs"] = sorted(job.info.get("input_refs") or {})
            out = job.outputs()
            seen["outputs"] = {k: (len(v["s"]), v["s"][0]) for k, v in out.items()}
            return {"n": len(out)}
        w.start()
        wf = c.submit_workflow([
            {"name": "x", "type": t + ".big", "payload": {"c": "x"}},
            {"name": "y", "type": t + ".big", "payload": {"c": "y"}},
            {"name": "join", "type": t + ".join", "depends_on": ["x", "y"]},
        ])
        self.assertEqual(self.wait_done(wf.steps["join"]).result, {"n": 2})
        self.assertEqual(len(seen["inline"]), 1)
        self.assertEqual(len(seen["refs"]), 1)
        self.assertEqual(sorted(seen["inline"] + seen["refs"]), ["x", "y"])
        self.assertEqual(seen["outputs"], {"x": (600000, "x"), "y": (600000, "y")})

    def test_results_over_a_record(self):
        # A 3 MB result (over the 256 KiB a record keeps, and over the 1 MiB
        # body of other requests) is reported, kept as a file and named by
        # result_ref; the dependent reads it with job.output, and the
        # client's get, wait and result give it whole.
        c = self.client
        t = unique("wfhuge")
        w = self.worker()

        @w.task(t + ".make")
        def make(job):
            return {"s": "z" * 3000000}

        @w.task(t + ".use")
        def use(job):
            return {"n": len(job.output("make")["s"])}
        w.start()
        wf = c.submit_workflow([
            {"name": "make", "type": t + ".make"},
            {"name": "use", "type": t + ".use", "depends_on": ["make"]},
        ])
        self.assertEqual(self.wait_done(wf.steps["use"]).result, {"n": 3000000})
        job = c.get(wf.steps["make"])
        self.assertRegex(job.result_ref["name"], r"^out/result-1-[0-9a-f]{16}\.json$")
        self.assertEqual(job.result_ref["size"], len('{"s":""}') + 3000000)
        self.assertEqual(len(job.result["s"]), 3000000)
        self.assertEqual(c.wait(wf.steps["make"]).result, job.result)
        self.assertEqual(c.result(wf.steps["make"]), job.result)
        self.assertEqual(c.result(wf.steps["use"]), {"n": 3000000})

    def test_result_over_the_limit_fails_for_good(self):
        # Over 16 MiB the server refuses the report (413): the worker fails
        # the job for good instead, its retries unused.
        t = unique("hugeres")
        w = self.worker()

        @w.task(t)
        def huge(job):
            return "x" * (17 << 20)
        w.start()
        job = self.client.submit(t, max_retries=3)
        done = self.wait_done(job.id, timeout=60)
        self.assertEqual(done.state, "failed")
        self.assertEqual(done.error["code"], "RESULT_TOO_LARGE")
        self.assertEqual(done.retries, 0)

    def test_async_handler(self):
        t = unique("asyncfn")
        w = self.worker()

        @w.task(t)
        async def run(job):
            return {"n": job.payload["n"] + 1}
        w.start()
        job = self.client.submit(t, {"n": 1})
        self.assertEqual(self.wait_done(job.id).result, {"n": 2})

    def test_failures(self):
        c = self.client
        base = unique("fail")
        w = self.worker()

        @w.task(base + ".coded")
        def coded(job):
            raise jetflow.JobError("BAD_INPUT", "no such page", retryable=False)

        @w.task(base + ".perm")
        def perm(job):
            raise jetflow.Permanent("give up", code="GIVE_UP")

        @w.task(base + ".crash")
        def crash(job):
            raise KeyError("boom")

        @w.task(base + ".noretry")
        def noretry(job):
            raise jetflow.JobError("VALIDATION", "refused")

        @w.task(base + ".badresult")
        def badresult(job):
            return {"x": object()}
        w.start()
        fails = ["job.submitted", "job.claimed", "job.started", "job.failed"]
        j = c.submit(base + ".coded", max_retries=3)
        d = self.wait_done(j.id)
        self.assertEqual((d.state, d.error["code"], d.error["message"], d.attempts, d.retries),
                         ("failed", "BAD_INPUT", "no such page", 1, 0))
        self.assertEvents(j.id, fails)
        j = c.submit(base + ".perm", max_retries=3)
        d = self.wait_done(j.id)
        self.assertEqual((d.state, d.error["code"], d.error["message"], d.attempts), ("failed", "GIVE_UP", "give up", 1))
        j = c.submit(base + ".crash", max_retries=1, backoff=0)
        d = self.wait_done(j.id)
        self.assertEqual((d.state, d.error["code"], d.attempts, d.retries), ("failed", "ERROR", 2, 1))
        self.assertEqual(d.error["message"], "KeyError: 'boom'")
        self.assertIn("in crash", d.error["stack"])
        self.assertEvents(j.id, ["job.submitted", "job.claimed", "job.started", "job.retry_scheduled",
                                 "job.claimed", "job.started", "job.failed"])
        j = c.submit(base + ".noretry", max_retries=3, no_retry_on=["VALIDATION"])
        d = self.wait_done(j.id)
        self.assertEqual((d.state, d.error["code"], d.attempts), ("failed", "VALIDATION", 1))
        j = c.submit(base + ".badresult", max_retries=3)
        d = self.wait_done(j.id)
        self.assertEqual((d.state, d.error["code"], d.attempts), ("failed", "ERROR", 1))
        self.assertIn("handler result", d.error["message"])
        self.wait_count(w, "failed", 6)


class ConcurrencyTest(ServerTest):
    def test_concurrency_bounds_claims(self):
        c = self.client
        t = unique("conc")
        w = self.worker(concurrency=3)
        gate = threading.Event()
        running = []
        lock = threading.Lock()

        @w.task(t)
        def run(job):
            with lock:
                running.append(job.id)
            gate.wait(20)
            return job.payload
        jobs = [c.submit(t, i).id for i in range(4)]
        w.start()
        wait_until(lambda: len(running) == 3, what="three handlers running at once")
        states = sorted(c.get(i).state for i in jobs)
        self.assertEqual(states, ["queued", "running", "running", "running"])
        self.assertEqual(len(w.active()), 3)
        gate.set()
        for i in jobs:
            self.assertEqual(self.wait_done(i).state, "succeeded")
        self.assertEqual(sorted(running), sorted(jobs))
        self.assertEqual(sorted(c.get(i).result for i in jobs), [0, 1, 2, 3])


class CancelTest(ServerTest):
    def test_cancel_stops_the_handler(self):
        c = self.client
        t = unique("cancel")
        w = self.worker()
        seen = {}
        started = threading.Event()

        @w.task(t)
        def run(job):
            if job.payload == "second":
                return "ok"
            started.set()
            try:
                job.sleep(30)
            except jetflow.Cancelled as e:
                seen["reason"] = e.reason
                seen["at"] = time.monotonic()
                raise
            return "slept"
        w.start()
        job = c.submit(t, "first")
        self.assertTrue(started.wait(15))
        self.wait_state(job.id, "running")
        t0 = time.monotonic()
        c.cancel(job.id, reason="stop it")
        wait_until(lambda: "reason" in seen, timeout=10, what="the handler told of the cancel")
        # Heard from the heartbeat: within one interval (1 s here) and a bit.
        self.assertLess(seen["at"] - t0, w.heartbeat_interval + 1.5)
        self.assertEqual(seen["reason"], "cancelled")
        wait_until(lambda: w.counts["dropped"] == 1, what="the attempt dropped")
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.cancelled"])
        # The worker goes on with the next job.
        nxt = c.submit(t, "second")
        self.assertEqual(self.wait_done(nxt.id).result, "ok")
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.cancelled"])

    def test_progress_on_a_cancelled_job_raises_cancelled(self):
        c = self.client
        t = unique("cancelprog")
        w = self.worker(heartbeat_wait=False)
        cancelled = threading.Event()
        seen = {}

        @w.task(t)
        def run(job):
            job.progress(0, 2, "start")
            cancelled.wait(15)
            try:
                job.progress(1, 2, "more")
            except jetflow.Cancelled as e:
                seen["reason"] = e.reason
                raise
            return "unreachable"
        w.start()
        job = c.submit(t)
        wait_until(lambda: c.get(job.id).progress, what="the first progress")
        c.cancel(job.id)
        cancelled.set()
        wait_until(lambda: "reason" in seen, what="progress refused")
        self.assertEqual(seen["reason"], "cancelled")
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.progress", "job.cancelled"])


class DeadlineTest(ServerTest):
    """The deadline is enforced on the Python side too: the handler is told
    at the deadline, and an overrunning handler's attempt is reported failed
    with TIMEOUT."""

    def test_handler_told_at_deadline(self):
        c = self.client
        t = unique("deadline")
        w = self.worker()
        seen = {}

        @w.task(t)
        def run(job):
            seen["deadline"] = job.deadline
            t0 = time.monotonic()
            try:
                job.sleep(30)
            except jetflow.Cancelled as e:
                seen["reason"], seen["after"] = e.reason, time.monotonic() - t0
                raise
        w.start()
        job = c.submit(t, timeout=1, max_retries=0)
        d = self.wait_done(job.id)
        self.assertEqual((d.state, d.error["code"], d.attempts), ("failed", "TIMEOUT", 1))
        self.assertEqual(seen["reason"], "deadline")
        self.assertGreater(seen["after"], 0.5)  # the deadline runs from the claim (or the server's start)
        self.assertLess(seen["after"], 2.0)
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.failed"])

    def test_overrun_reported_timeout(self):
        c = self.client
        t = unique("overrun")
        w = self.worker()
        returned = threading.Event()

        @w.task(t)
        def run(job):
            time.sleep(4.5)  # ignores job.cancelled
            returned.set()
            return "too late"
        w.start()
        job = c.submit(t, timeout=1, max_retries=1, backoff=30)
        t0 = time.monotonic()
        d = self.wait_state(job.id, "scheduled", "failed")
        # Reported by the worker at deadline + overrun (about 2 s after the
        # start), while the handler runs (4.5 s).
        self.assertFalse(returned.is_set())
        self.assertLess(time.monotonic() - t0, 4.4)
        self.assertEqual((d.state, d.error["code"], d.retries), ("scheduled", "TIMEOUT", 1))
        self.assertTrue(returned.wait(10))
        wait_until(lambda: not w.active(), what="the attempt over")
        c.cancel(job.id)
        self.assertEvents(job.id, ["job.submitted", "job.claimed", "job.started", "job.retry_scheduled",
                                   "job.cancelled"])


class StopTest(ServerTest):
    def test_stop_gives_back_unfinished_jobs(self):
        c = self.client
        t = unique("stop")
        w = self.worker(grace=0.5)
        seen = {}
        release = threading.Event()

        @w.task(t)
        def run(job):
            if job.payload == "quick":
                time.sleep(0.3)
                return "finished in the grace"
            while not release.is_set():  # ignores cancellation: the give-back must not wait for it
                time.sleep(0.05)
            seen["cancelled"] = job.cancel_reason
            return "too late"
        w.concurrency = 2
        w.start()
        slow = c.submit(t, "slow")
        self.wait_state(slow.id, "running")
        quick = c.submit(t, "quick")
        self.wait_state(quick.id, "running", "succeeded")
        t0 = time.monotonic()
        w.stop()
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(c.get(quick.id).result, "finished in the grace")
        back = c.get(slow.id)
        self.assertEqual(back.state, "queued")
        self.assertEvents(slow.id, ["job.submitted", "job.claimed", "job.started", "job.requeued"])
        self.assertNotIn(w.id, [x.id for x in c.workers()])
        release.set()
        wait_until(lambda: "cancelled" in seen, what="the handler ended")
        self.assertEqual(seen["cancelled"], "shutdown")
        self.wait_count(w, "given_back", 1)
        self.assertEvents(slow.id, ["job.submitted", "job.claimed", "job.started", "job.requeued"])
        c.cancel(slow.id)


class RegisteredTypeTest(ServerTest):
    def test_schema_registered_by_the_worker(self):
        c = self.client
        cat = unique("wcat").replace(".", "")
        schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
        w = self.worker()

        @w.task(cat + ":square", schema=schema)
        def square(job):
            return job.payload["n"] ** 2

        @w.task("@global:%s:cube" % cat)
        def cube(job):
            return job.payload["n"] ** 3
        w.start()
        self.assertEqual(sorted(w.registration["types"]),
                         sorted(["default:%s:square" % cat, "@global:%s:cube" % cat]))
        self.assertEqual(c.get_type(cat + ":square").schema, schema)
        with self.assertRaises(jetflow.SchemaViolation) as cm:
            c.submit(cat + ":square", {"n": "two"})
        self.assertEqual([v["pointer"] for v in cm.exception.violations], ["/n"])
        job = c.submit(cat + ":square", {"n": 7})
        self.assertEqual(job.type, "default:%s:square" % cat)
        self.assertEqual(self.wait_done(job.id).result, 49)
        job = c.submit(cat + ":cube", {"n": 2})  # found in @global
        self.assertEqual(job.type, "@global:%s:cube" % cat)
        self.assertEqual(self.wait_done(job.id).result, 8)
        # A schema for a free-form type is refused, and raised by start().
        w2 = self.worker()
        w2.task(unique("free"), schema={"type": "object"})(lambda job: None)
        with self.assertRaises(jetflow.InvalidInput):
            w2.start()


class ProtocolTest(ServerTest):
    def test_registers_again_when_its_registration_is_gone(self):
        c = self.client
        t = unique("rereg")
        w = self.worker()
        w.task(t)(lambda job: job.payload)
        w.start()
        old = w.id
        c.request("DELETE", "/workers/" + old)  # as if it had expired
        wait_until(lambda: w.id != old, what="registered again")
        self.assertEqual([x.name for x in c.workers() if x.id in (old, w.id)], [w.name])
        job = c.submit(t, "again")
        self.assertEqual(self.wait_done(job.id).result, "again")
        self.assertEqual(c.get(job.id).worker, w.id)

    def test_heartbeat_mode(self):
        w = self.worker()
        w.task(unique("hb"))(lambda job: None)
        w.start()
        want = "long-poll" if has("heartbeat_wait") else "periodic"
        wait_until(lambda: w.heartbeat_mode, timeout=10, what="the heartbeat mode known")
        self.assertEqual(w.heartbeat_mode, want)
        self.assertEqual(w.heartbeat_interval, 1.0)  # a third of serve --http-lease 3s

    def test_claimant_errors(self):
        """What a worker that does not hold a job is told, as exceptions."""
        c = self.client
        t = unique("raw")
        job = c.submit(t)
        a = c.request("POST", "/workers", {"name": "raw-a", "types": [t], "concurrency": 1})
        b = c.request("POST", "/workers", {"name": "raw-b", "types": [t]})
        self.addCleanup(c.request, "DELETE", "/workers/" + a["id"])
        self.addCleanup(c.request, "DELETE", "/workers/" + b["id"])
        got = c.request("POST", "/tasks/claim", {"worker_id": a["id"], "wait": 5})["job"]
        self.assertEqual(got["id"], job.id)
        with self.assertRaises(jetflow.ConcurrencyLimit) as cm:
            c.request("POST", "/tasks/claim", {"worker_id": a["id"], "wait": 1})
        self.assertEqual((cm.exception.status, cm.exception.worker_id), (409, a["id"]))
        with self.assertRaises(jetflow.NotClaimant) as cm:
            c.request("PATCH", "/jobs/" + job.id, {"worker_id": b["id"], "state": "running"})
        self.assertEqual(cm.exception.status, 409)
        with self.assertRaises(jetflow.InvalidTransition) as cm:
            c.request("PATCH", "/jobs/" + job.id, {"worker_id": a["id"], "state": "succeeded"})
        self.assertEqual((cm.exception.status, cm.exception.state), (409, "claimed"))
        with self.assertRaises(jetflow.NotFound):
            c.request("POST", "/workers/wk-01JAAAAAAAAAAAAAAAAAAAAAAA/heartbeat")
        c.cancel(job.id)
