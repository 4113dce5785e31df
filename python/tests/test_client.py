"""The Client against a real server: every call, exact answers."""

import asyncio
import datetime
import io
import pathlib
import tempfile
import threading
import time
import zipfile

import jetflow
from jetflow.worker import _parse_time as _utc
from tests.support import FAKE_JOB, ServerTest, event_types, unique, wait_until


class SubmitTest(ServerTest):
    def test_submit_takes_every_option(self):
        c = self.client
        parent = c.submit(unique("parent"))
        t = unique("opts")
        key = unique("key")
        before = datetime.datetime.now(datetime.timezone.utc)
        job = c.submit(t, {"n": 1}, queue="q-opts", delay=30, max_retries=5, backoff=2, backoff_cap=60, jitter=0,
                       retry_on=["A"], no_retry_on=["B"], timeout="45s", queue_timeout=120, max_lease_requeues=2,
                       idempotency_key=key, priority=7, tags=["x", "y"], namespace="py-opts", parent=parent.id,
                       user="ann", concurrency_key="acct-1")
        self.assertIsInstance(job, jetflow.JobInfo)
        self.assertEqual(job.state, "scheduled")
        self.assertEqual((job.type, job.queue, job.namespace, job.payload), (t, "q-opts", "py-opts", {"n": 1}))
        self.assertEqual((job.max_retries, job.backoff_seconds, job.timeout_seconds, job.max_lease_requeues),
                         (5, 2, 45, 2))
        self.assertEqual((job.priority, job.tags, job.idempotency_key, job.parent_id, job.user),
                         (7, ["x", "y"], key, parent.id, "ann"))
        self.assertEqual(job.concurrency_key, "acct-1")
        run_at = _utc(job.run_at)
        self.assertGreaterEqual(run_at, before + datetime.timedelta(seconds=29))
        self.assertLessEqual(run_at, before + datetime.timedelta(seconds=40))
        # The same key answers the same job; nothing new is written.
        again = c.submit(t, {"n": 2}, idempotency_key=key, namespace="py-opts")
        self.assertEqual((again.id, again.payload, again.events), (job.id, {"n": 1}, 1))
        self.assertEqual(event_types(c, job.id), ["job.submitted"])

    def test_unique_key(self):
        c = self.client
        t, key = unique("uniq"), unique("ukey")
        job = c.submit(t, {"n": 1}, unique_key=key, unique_for="1h", unique_while="not-succeeded")
        self.assertEqual((job.unique["key"], job.unique["while"], job.unique["for_seconds"], job.unique["holds"]),
                         (key, "not-succeeded", 3600, True))
        # The same key answers the job that holds it, which records it.
        again = c.submit(t, {"n": 2}, unique_key=key)
        self.assertEqual((again.id, again.payload), (job.id, {"n": 1}))
        self.assertEqual(event_types(c, job.id), ["job.submitted", "job.duplicate"])
        c.cancel(job.id)  # not-succeeded: a cancelled job still holds its key
        self.assertEqual(c.submit(t, unique_key=key).id, job.id)
        by_fields = c.submit(t, {"to": "ada", "n": 3}, unique_fields=["to"])
        self.assertEqual(by_fields.unique["fields"], ["to"])
        self.assertEqual(c.submit(t, {"n": 4, "to": "ada"}, unique_fields=["to"]).id, by_fields.id)
        for opts, field in ((dict(unique_key="k", unique_fields=["a"]), "unique_fields"),
                            (dict(unique_key="k", unique_while="sometimes"), "unique_while"),
                            (dict(unique_for=60), "unique_for")):
            with self.subTest(field=field):
                with self.assertRaises(jetflow.InvalidInput) as cm:
                    c.submit(t, **opts)
                self.assertEqual(cm.exception.field, field)
        with self.assertRaises(TypeError):
            c.submit(t, unique_fields="to")

    def test_run_at_and_durations(self):
        c = self.client
        at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(hours=1)
        job = c.submit(unique("runat"), run_at=at, timeout=datetime.timedelta(minutes=2), backoff=0.5)
        self.assertEqual(job.state, "scheduled")
        self.assertEqual(_utc(job.run_at), at)
        self.assertEqual((job.timeout_seconds, job.backoff_seconds), (120, 0.5))

    def test_refused_options_name_their_field(self):
        c = self.client
        for opts, field in ((dict(jitter=2), "jitter"), (dict(backoff_cap=-1), "backoff_cap"),
                            (dict(queue_timeout=-1), "queue_timeout"), (dict(retry_on=[""]), "retry_on"),
                            (dict(no_retry_on=[""]), "no_retry_on"), (dict(max_retries=-1), "max_retries"),
                            (dict(max_lease_requeues=1001), "max_lease_requeues"), (dict(priority=5000), "priority"),
                            (dict(delay=1, run_at="2030-01-01T00:00:00Z"), "delay"), (dict(parent="nope"), "parent"),
                            (dict(timeout=0), "timeout"), (dict(queue="bad queue"), "queue")):
            with self.subTest(field=field):
                with self.assertRaises(jetflow.InvalidInput) as cm:
                    c.submit("refused", **opts)
                e = cm.exception
                self.assertEqual((type(e), e.status, e.slug, e.field), (jetflow.InvalidInput, 400, "invalid-input", field))
                self.assertTrue(e.detail)
                self.assertEqual(e.problem["type"], "invalid-input")
        self.assertEqual(list(c.list(type="refused")), [])
        with self.assertRaises(jetflow.InvalidNamespace) as cm:
            c.submit("x", namespace="a@b")
        self.assertEqual((cm.exception.status, cm.exception.field), (400, "namespace"))
        with self.assertRaises(TypeError):
            c.submit("x", tags="notalist")

    def test_too_large_and_malformed(self):
        c = self.client
        with self.assertRaises(jetflow.TooLarge) as cm:
            c.submit(unique("big"), {"blob": "x" * (1 << 20)})
        self.assertEqual((cm.exception.status, cm.exception.slug), (413, "payload-too-large"))
        with self.assertRaises(jetflow.MalformedRequest) as cm:
            c.request("POST", "/jobs", {"type": "x", "bogus": 1})
        self.assertEqual((cm.exception.status, cm.exception.slug), (400, "malformed-request"))
        self.assertIn('"bogus"', cm.exception.detail)
        self.assertIsInstance(cm.exception, jetflow.InvalidInput)


class ReadTest(ServerTest):
    def test_get_wait_and_not_found(self):
        c = self.client
        with self.assertRaises(jetflow.NotFound) as cm:
            c.get(FAKE_JOB)
        self.assertEqual((cm.exception.status, cm.exception.slug, cm.exception.job_id), (404, "not-found", FAKE_JOB))
        job = c.submit(unique("nobody"))
        self.assertEqual(c.get(job.id).state, "queued")
        t0 = time.monotonic()
        same = c.get(job.id, wait=1)
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)
        self.assertEqual((same.id, same.state), (job.id, "queued"))
        t0 = time.monotonic()
        with self.assertRaises(jetflow.WaitTimeout) as cm:
            c.wait(job.id, timeout=1.5)
        self.assertGreaterEqual(time.monotonic() - t0, 1.5)
        self.assertLess(time.monotonic() - t0, 2.5)
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertEqual((cm.exception.job.id, cm.exception.job.state), (job.id, "queued"))
        # wait answers as soon as the job ends (pushed, not polled).
        threading.Timer(0.5, c.cancel, (job.id,)).start()
        t0 = time.monotonic()
        done = c.wait(job.id, timeout=20)
        self.assertEqual(done.state, "cancelled")
        self.assertTrue(done.terminal)
        self.assertLess(time.monotonic() - t0, 5)

    def test_cancel_and_retry(self):
        c = self.client
        job = c.submit(unique("cr"), {"k": 1}, max_retries=1, tags=["t"])
        with self.assertRaises(jetflow.InvalidTransition) as cm:
            c.retry(job.id)
        self.assertEqual((cm.exception.status, cm.exception.slug, cm.exception.job_id),
                         (409, "invalid-transition", job.id))
        done = c.cancel(job.id, reason="not needed")
        self.assertEqual(done.state, "cancelled")
        self.assertEqual(c.cancel(job.id).events, done.events)  # already terminal: nothing written
        self.assertEqual(event_types(c, job.id), ["job.submitted", "job.cancelled"])
        self.assertEqual(c.events(job.id)[1].message, "not needed")
        again = c.retry(job.id)
        self.assertNotEqual(again.id, job.id)
        self.assertEqual((again.retry_of, again.type, again.payload, again.state, again.max_retries, again.tags),
                         (job.id, job.type, {"k": 1}, "queued", 1, ["t"]))
        k1 = c.retry(job.id, idempotency_key="r1")
        k2 = c.retry(job.id, idempotency_key="r1")
        self.assertEqual(k1.id, k2.id)
        with self.assertRaises(jetflow.NotFound):
            c.cancel(FAKE_JOB)
        # Purge: a queued job is refused; the cancelled one is gone (the
        # answer names the purge's reason).
        with self.assertRaises(jetflow.InvalidTransition):
            c.purge_job(again.id)
        self.assertEqual(c.purge_job(job.id, reason="test data"), 1)
        with self.assertRaises(jetflow.Gone) as gone:
            c.get(job.id)
        self.assertIn("test data", str(gone.exception))

    def test_reprioritize(self):
        c = self.client
        job = c.submit(unique("rp"), {}, delay="1h")
        moved = c.reprioritize(job.id, -5)
        self.assertEqual((moved.state, moved.priority), ("scheduled", -5))
        self.assertEqual(c.reprioritize(job.id, -5).events, moved.events)  # the same: nothing written
        self.assertEqual(event_types(c, job.id), ["job.submitted", "job.reprioritized"])
        with self.assertRaises(jetflow.InvalidInput) as cm:
            c.reprioritize(job.id, 1001)
        self.assertEqual(cm.exception.field, "priority")
        c.cancel(job.id)
        with self.assertRaises(jetflow.InvalidTransition):
            c.reprioritize(job.id, 1)
        with self.assertRaises(jetflow.NotFound):
            c.reprioritize(FAKE_JOB, 1)

    def test_list_follows_cursors(self):
        c = self.client
        t = unique("list")
        ids = [c.submit(t, {"i": i}).id for i in range(7)]
        got = list(c.list(type=t, page_size=3))
        self.assertEqual([j.id for j in got], ids[::-1])
        self.assertTrue(all(isinstance(j, jetflow.JobInfo) and j.state == "queued" for j in got))
        page = c.list_page(type=t, limit=3)
        self.assertEqual(len(page.jobs), 3)
        self.assertTrue(page.next_cursor)
        rest = list(c.list(type=t, page_size=3, cursor=page.next_cursor))
        self.assertEqual([j.id for j in page.jobs + rest], ids[::-1])
        self.assertEqual([j.id for j in c.list(type=t, state="cancelled")], [])
        c.cancel(ids[2])
        self.assertEqual([j.id for j in c.list(type=t, state="cancelled")], [ids[2]])
        with self.assertRaises(jetflow.BadCursor) as cm:
            c.list_page(type=t, cursor="nope")
        self.assertEqual((cm.exception.status, cm.exception.slug), (400, "bad-cursor"))
        with self.assertRaises(jetflow.InvalidInput) as cm:
            list(c.list(state="sleeping"))
        self.assertEqual(cm.exception.field, "state")

    def test_children(self):
        c = self.client
        parent = c.submit(unique("parent"))
        t = unique("child")
        kids = [c.submit(t, {"i": i}, parent=parent.id).id for i in range(3)]
        got = list(c.children(parent.id, page_size=2))
        self.assertEqual([j.id for j in got], kids[::-1])
        self.assertEqual({j.parent_id for j in got}, {parent.id})
        self.assertEqual(list(c.children(kids[0])), [])
        with self.assertRaises(jetflow.NotFound):
            list(c.children(FAKE_JOB))

    def test_events_and_follow(self):
        c = self.client
        t = unique("follow")
        job = c.submit(t, max_retries=0)
        seen = []
        followed = threading.Thread(target=lambda: seen.extend(c.follow(job.id, timeout=30)))
        followed.start()
        w = self.worker()
        gate = threading.Event()

        @w.task(t)
        def run(j):
            j.progress(1, 2, "half")
            gate.wait(10)
            return {"ok": True}
        w.start()
        wait_until(lambda: "job.progress" in [e.type for e in seen], what="the progress event followed live")
        self.assertTrue(followed.is_alive())
        gate.set()
        followed.join(30)
        self.assertFalse(followed.is_alive())
        want = ["job.submitted", "job.claimed", "job.started", "job.progress", "job.succeeded"]
        self.assertEqual([e.type for e in seen], want)
        history = c.events(job.id)
        self.assertEqual(history, seen)
        self.assertTrue(all(isinstance(e, jetflow.Event) for e in history))
        self.assertEqual([e.seq for e in history], sorted(e.seq for e in history))
        self.assertEqual(history[3].progress, {"current": 1, "total": 2, "message": "half"})
        self.assertEqual(history[4].result, {"ok": True})
        self.assertEqual([e.type for e in c.events(job.id, after=history[1].seq)], want[2:])
        self.assertEqual([e.type for e in c.events(job.id, after=history[1].seq, limit=1)], want[2:])
        # Following an ended job gives its history after `after`, then ends.
        self.assertEqual([e.type for e in c.follow(job.id, after=history[2].seq)], want[3:])
        self.assertEqual(list(c.follow(job.id, after=history[4].seq)), [])


class FilesTest(ServerTest):
    def test_files_in_archive_out(self):
        c = self.client
        t = unique("files")
        tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(__import__("shutil").rmtree, tmp)
        (tmp / "a.txt").write_text("alpha")
        tree = tmp / "tree"
        (tree / "sub").mkdir(parents=True)
        (tree / "sub" / "c.txt").write_text("gamma")
        (tree / "top.txt").write_text("top")
        job = c.submit(t, {"x": 1}, files=[tmp / "a.txt", ("data/b.txt", b"beta"), ("blob.bin", tmp / "a.txt"),
                                             tree])
        self.assertEqual(sorted(f["name"] for f in job.files),
                         ["a.txt", "blob.bin", "data/b.txt", "sub/c.txt", "top.txt"])
        self.assertEqual({f["name"]: f["size"] for f in job.files}["data/b.txt"], 4)
        with self.assertRaises(jetflow.NotEnded) as cm:
            c.download(job.id)
        self.assertEqual((cm.exception.status, cm.exception.job.id, cm.exception.job.state), (202, job.id, "queued"))
        files = c.files(job.id)
        self.assertEqual(sorted(f["name"] for f in files.inputs), sorted(f["name"] for f in job.files))
        self.assertEqual(files.outputs, [])

        w = self.worker()
        seen = {}

        @w.task(t)
        def upper(j):
            for name, path in sorted(j.inputs.items()):
                seen[name] = path.read_bytes()
                out = j.output_dir / "up" / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(path.read_bytes().upper())
            (j.output_dir / "note.txt").write_text("done")
            return {"files": len(j.inputs)}
        w.start()
        done = self.wait_done(job.id)
        self.assertEqual((done.state, done.result), ("succeeded", {"files": 5}))
        self.assertEqual(seen, {"a.txt": b"alpha", "blob.bin": b"alpha", "data/b.txt": b"beta",
                                "sub/c.txt": b"gamma", "top.txt": b"top"})
        z = zipfile.ZipFile(io.BytesIO(c.download(job.id)))
        self.assertEqual(sorted(z.namelist()), ["note.txt", "up/a.txt", "up/blob.bin", "up/data/b.txt",
                                                "up/sub/c.txt", "up/top.txt"])
        self.assertEqual(z.read("up/data/b.txt"), b"BETA")
        dest = tmp / "out.zip"
        self.assertEqual(c.download(job.id, dest), dest)
        self.assertEqual(sorted(zipfile.ZipFile(dest).namelist()), sorted(z.namelist()))
        buf = io.BytesIO()
        c.download(job.id, buf, wait=True, timeout=5)
        self.assertEqual(buf.getvalue(), dest.read_bytes())
        self.assertEqual([f["name"] for f in c.files(job.id).outputs], ["out/result.zip"])

        # A job that ended without an archive; a refused file name.
        plain = c.submit(unique("plain"))
        c.cancel(plain.id)
        with self.assertRaises(jetflow.NoArchive) as cm:
            c.download(plain.id)
        self.assertEqual((cm.exception.status, cm.exception.slug), (404, "no-archive"))
        with self.assertRaises(jetflow.InvalidFileName) as cm:
            c.submit(unique("badname"), files=[("../up.txt", b"x")])
        self.assertEqual(cm.exception.status, 400)


class TypesTest(ServerTest):
    def test_register_validate_list(self):
        c = self.client
        cat = unique("cat").replace(".", "")
        schema = {"type": "object", "required": ["amount", "currency"],
                  "properties": {"amount": {"type": "number"}, "currency": {"type": "string"}}}
        t = c.register_type(cat + ":invoice", schema, description="an invoice")
        self.assertEqual((t.full_name, t.scope, t.category, t.name, t.deleted, t.description),
                         ("default:%s:invoice" % cat, "default", cat, "invoice", False, "an invoice"))
        self.assertEqual(t.schema, schema)
        self.assertEqual(c.register_type("default:%s:invoice" % cat, schema).full_name, t.full_name)
        with self.assertRaises(jetflow.SchemaConflict) as cm:
            c.register_type(cat + ":invoice", {"type": "string"})
        self.assertEqual((cm.exception.status, cm.exception.slug), (409, "schema-conflict"))
        self.assertIsInstance(cm.exception, jetflow.Conflict)
        with self.assertRaises(jetflow.SchemaViolation) as cm:
            c.submit(cat + ":invoice", {"amount": "ten"})
        e = cm.exception
        self.assertEqual((e.status, e.slug, e.field), (422, "schema-violation", "payload"))
        self.assertEqual(sorted(v["pointer"] for v in e.violations), ["/", "/amount"])
        job = c.submit(cat + ":invoice", {"amount": 10, "currency": "EUR"})
        self.assertEqual(job.type, "default:%s:invoice" % cat)
        self.assertIn(t.full_name, [x.full_name for x in c.types()])
        self.assertIn(t.full_name, [x.full_name for x in c.types(namespace="default")])
        self.assertNotIn(t.full_name, [x.full_name for x in c.types(namespace="elsewhere")])
        got = c.get_type(cat + ":invoice")
        self.assertEqual((got.full_name, got.schema, got.queued), (t.full_name, schema, 1))
        with self.assertRaises(jetflow.UnknownType) as cm:
            c.submit(cat + ":nothing")
        self.assertEqual(cm.exception.status, 404)
        self.assertIsInstance(cm.exception, jetflow.NotFound)
        with self.assertRaises(jetflow.UnknownType):
            c.get_type(cat + ":nothing")
        with self.assertRaises(jetflow.InvalidSchema) as cm:
            c.register_type(cat + ":bad", {"type": 5})
        self.assertEqual(cm.exception.status, 422)
        with self.assertRaises(jetflow.InvalidCategory):
            c.register_type("bad cat:x")
        with self.assertRaises(ValueError):
            c.register_type("justaname")
        c.cancel(job.id)


class AsyncClientTest(ServerTest):
    def test_async_calls(self):
        t = unique("async")

        async def main():
            ac = jetflow.AsyncClient(self.client.base_url)
            jobs = [await ac.submit(t, {"i": i}) for i in range(3)]
            got = await ac.get(jobs[0].id)
            listed = [j.id async for j in ac.list(type=t, page_size=2)]
            done = await asyncio.gather(ac.cancel(jobs[0].id), ac.wait(jobs[0].id, timeout=10))
            events = [e.type async for e in ac.follow(jobs[0].id)]
            try:
                await ac.get(FAKE_JOB)
            except jetflow.NotFound as e:
                missing = e.status
            return jobs, got, listed, done, events, missing
        jobs, got, listed, done, events, missing = asyncio.run(main())
        self.assertEqual(got.id, jobs[0].id)
        self.assertEqual(listed, [j.id for j in jobs][::-1])
        self.assertEqual([d.state for d in done], ["cancelled", "cancelled"])
        self.assertEqual(events, ["job.submitted", "job.cancelled"])
        self.assertEqual(missing, 404)


class RegistryReadTest(ServerTest):
    def test_queues_namespaces_ready(self):
        c = self.client
        q = unique("q").replace(".", "-")
        job = c.submit(unique("qjob"), queue=q, namespace="py-ns")
        self.assertTrue(c.ready())
        got = {x.name: x for x in c.queues()}
        self.assertEqual((got[q].paused, got[q].jobs.get("queued")), (False, 1))
        ns = {x.name: x for x in c.namespaces()}
        self.assertGreaterEqual(ns["py-ns"].jobs["queued"], 1)
        self.assertIn("default", ns)
        self.assertEqual([j.id for j in c.list(queue=q)], [job.id])
        self.assertEqual([j.id for j in jetflow.Client(c.base_url, namespace="py-ns").list(queue=q)], [job.id])
        self.assertEqual(list(jetflow.Client(c.base_url, namespace="elsewhere").list(queue=q)), [])
        c.cancel(job.id)
