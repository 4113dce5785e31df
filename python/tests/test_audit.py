"""The audit of the event log (docs/audit.md): audit_verify, audit_pubkey,
audit_export, and get/list as of an instant, against real servers."""

import datetime
import json
import unittest

import jetflow
from tests.support import ADMIN_TOKEN, AUTH_URL, FAKE_JOB, ServerTest, unique


def _ns():
    return unique("audit").replace(".", "-")


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


LONG_AGO = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)


class AuditTest(ServerTest):
    def _job(self, ns):
        """A job of namespace ns, submitted then cancelled, and an instant
        between the two."""
        c = self.client
        job = c.submit(unique("audit.t"), {"n": 1}, namespace=ns)
        between = _now()
        c.cancel(job.id, "audit")
        return job, between

    def test_pubkey_is_the_engines(self):
        key = self.client.audit_pubkey()
        self.assertEqual(set(key), {"pubkey", "source"})
        self.assertEqual(key.source, "engine")
        self.assertTrue(key.pubkey.startswith("N") and len(key.pubkey) == 56, key.pubkey)

    def test_verify_a_job_a_namespace_the_log(self):
        c = self.client
        ns = _ns()
        job, _ = self._job(ns)
        key = c.audit_pubkey().pubkey
        for rep in (c.audit_verify(job=job.id), c.audit_verify(namespace=ns),
                    jetflow.Client(c.base_url, namespace=ns).audit_verify(pubkey=key)):
            self.assertEqual(rep.findings, [])
            # Its two events and the checkpoints (serve writes one every 30 s).
            self.assertEqual(rep.events, 2 + rep.checkpoints, rep)
            self.assertEqual(rep.subjects, 1 + (1 if rep.checkpoints else 0), rep)
            if rep.checkpoints:
                self.assertEqual(rep.key, key)
        self.assertTrue(c.audit_verify(namespace=ns, pubkey=key).key_pinned)
        self.assertFalse(c.audit_verify(namespace=ns).key_pinned)
        rep = c.audit_verify(pubkey=key)
        self.assertEqual(rep.findings, [])
        self.assertGreaterEqual(rep.events, 2)
        # Nothing stored in a range of the past before the job.
        rep = c.audit_verify(namespace=ns, until=LONG_AGO)
        self.assertEqual((rep.events, rep.findings), (0, []))

    def test_verify_refuses_bad_input(self):
        c = self.client
        for kw, field in ((dict(since="monday"), "since"), (dict(until="2026-13-01T00:00:00Z"), "until"),
                          (dict(queue="a b"), "queue"), (dict(job="a.b"), "job"), (dict(pubkey="nope"), "pubkey"),
                          (dict(since=_now(), until=LONG_AGO), "until")):
            with self.assertRaises(jetflow.InvalidInput, msg=kw) as cm:
                c.audit_verify(**kw)
            self.assertEqual((cm.exception.status, cm.exception.field), (400, field), kw)
        with self.assertRaises(jetflow.InvalidInput) as cm:
            c.audit_export(since="x")
        self.assertEqual(cm.exception.field, "since")

    def test_export_holds_the_namespace(self):
        c = self.client
        ns = _ns()
        job, _ = self._job(ns)
        other, _ = self._job(_ns())
        body = c.audit_export(namespace=ns)
        lines = [json.loads(line) for line in body.decode().splitlines()]
        self.assertEqual((lines[0]["kind"], lines[0]["namespace"], lines[0]["v"]), ("header", ns, 1))
        events = [x for x in lines if x["kind"] == "event"]
        self.assertEqual([(e["job"], e["type"]) for e in events], [(job.id, "job.submitted"), (job.id, "job.cancelled")])
        self.assertNotIn(other.id.encode(), body)
        self.assertEqual({x["kind"] for x in lines} - {"header", "event", "checkpoint", "proof"}, set())

    def test_get_and_list_at(self):
        c = self.client
        ns = _ns()
        job, between = self._job(ns)
        self.assertEqual(c.get(job.id).state, "cancelled")
        self.assertEqual(c.get(job.id, at=between).state, "queued")
        self.assertEqual(c.get(job.id, at=between.isoformat()).state, "queued")
        self.assertEqual(c.get(job.id, at=_now()).state, "cancelled")
        with self.assertRaises(jetflow.NotFound):
            c.get(job.id, at=LONG_AGO)
        with self.assertRaises(jetflow.InvalidInput) as cm:
            c.get(job.id, at="yesterday")
        self.assertEqual(cm.exception.field, "at")
        self.assertEqual([(j.id, j.state) for j in c.list(namespace=ns, at=between)], [(job.id, "queued")])
        self.assertEqual([(j.id, j.state) for j in c.list(namespace=ns, at=_now())], [(job.id, "cancelled")])
        self.assertEqual(list(c.list(namespace=ns, at=_now(), state="queued")), [])
        self.assertEqual(list(c.list(namespace=ns, at=LONG_AGO)), [])
        page = c.list_page(namespace=ns, at=_now(), limit=1)
        self.assertEqual(([j.id for j in page], page.next_cursor, page.more), ([job.id], None, False))
        with self.assertRaises(jetflow.InvalidInput) as cm:
            c.list_page(namespace=ns, at=_now(), parent=FAKE_JOB)
        self.assertEqual(cm.exception.field, "parent")


class AuditAuthTest(unittest.TestCase):
    def setUp(self):
        if not AUTH_URL or not ADMIN_TOKEN:
            self.skipTest("JETFLOW_AUTH_URL and JETFLOW_ADMIN_TOKEN are not set (run through tests/python)")
        self.admin = jetflow.Client(AUTH_URL, token=ADMIN_TOKEN)

    def test_a_namespaced_token_audits_its_namespace_only(self):
        admin = self.admin
        mine, theirs = _ns(), _ns()
        reader = jetflow.Client(AUTH_URL, token=admin.create_token("auditor", "reader", mine).token)
        everyone = jetflow.Client(AUTH_URL, token=admin.create_token("all", "reader", "*").token)
        t = unique("audit.t")
        job = admin.submit(t, namespace=mine)
        their = admin.submit(t, namespace=theirs)

        rep = reader.audit_verify()
        self.assertEqual((rep.findings, rep.events), ([], 1 + rep.checkpoints))
        self.assertEqual(reader.audit_verify(job=job.id).events, 1 + rep.checkpoints)
        self.assertEqual(admin.audit_verify(namespace=mine).findings, [])
        self.assertEqual(reader.audit_pubkey().source, "engine")
        self.assertEqual([j.id for j in reader.list(at=_now())], [job.id])

        # Another namespace, or its job: refused as one that does not exist.
        errs = []
        for ns in (theirs, "nowhere"):
            with self.assertRaises(jetflow.Forbidden) as cm:
                reader.audit_verify(namespace=ns)
            errs.append((cm.exception.status, cm.exception.detail.replace(ns, "NS")))
        self.assertEqual(errs[0], errs[1])
        errs = []
        for id in (their.id, FAKE_JOB):
            with self.assertRaises(jetflow.NotFound) as cm:
                reader.audit_verify(job=id)
            errs.append((cm.exception.status, cm.exception.detail.replace(id, "ID")))
        self.assertEqual(errs[0], errs[1])
        with self.assertRaises(jetflow.Forbidden):
            reader.audit_export(namespace=theirs)
        # A reader of every namespace audits nothing: the whole log is the admin's.
        with self.assertRaises(jetflow.Forbidden):
            everyone.audit_verify()
        with self.assertRaises(jetflow.Forbidden):
            everyone.audit_verify(namespace=mine)
        admin.cancel(job.id)
        admin.cancel(their.id)
