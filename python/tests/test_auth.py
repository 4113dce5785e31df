"""Access control (serve --auth): tokens made by the first admin token, the
roles' limits, namespaces, and the exceptions they map to."""

import unittest

import jetflow
from tests.support import ADMIN_TOKEN, AUTH_URL, unique


class AuthTest(unittest.TestCase):
    def setUp(self):
        if not AUTH_URL or not ADMIN_TOKEN:
            self.skipTest("JETFLOW_AUTH_URL and JETFLOW_ADMIN_TOKEN are not set (run through tests/python)")
        self.admin = jetflow.Client(AUTH_URL, token=ADMIN_TOKEN)

    def test_token_flow(self):
        admin = self.admin
        ns = unique("acme").replace(".", "-")
        t = unique("authjob")
        prod = admin.create_token("ann", "producer", ns, ttl="1h")
        wtok = admin.create_token("w1", "worker", ns)
        self.assertTrue(prod.token.startswith("jft_"))
        self.assertEqual((prod.name, prod.role, prod.namespace, prod.revoked), ("ann", "producer", ns, False))
        self.assertIn(prod.id, [x.id for x in admin.tokens()])
        self.assertNotIn("token", [k for x in admin.tokens() for k in x])

        # No token, a bad token.
        with self.assertRaises(jetflow.Unauthorized) as cm:
            jetflow.Client(AUTH_URL).submit(t)
        self.assertEqual((cm.exception.status, cm.exception.slug), (401, "unauthenticated"))
        with self.assertRaises(jetflow.Unauthorized):
            jetflow.Client(AUTH_URL, token=prod.token[:-2] + "xx").get("01JAAAAAAAAAAAAAAAAAAAAAAA")

        # The producer submits into its namespace, for its name.
        producer = jetflow.Client(AUTH_URL, token=prod.token)
        job = producer.submit(t, {"n": 2})
        self.assertEqual((job.namespace, job.user, job.state), (ns, "ann", "queued"))
        with self.assertRaises(jetflow.Forbidden) as cm:
            producer.submit(t, namespace="default")
        self.assertEqual((cm.exception.status, cm.exception.slug), (403, "forbidden"))
        with self.assertRaises(jetflow.UserNotAllowed) as cm:
            producer.submit(t, user="bob")
        self.assertEqual((cm.exception.status, cm.exception.slug), (403, "user-not-allowed"))
        self.assertIsInstance(cm.exception, jetflow.Forbidden)
        with self.assertRaises(jetflow.Forbidden):
            producer.create_token("x", "admin", "*")
        with self.assertRaises(jetflow.Forbidden):
            producer.request("POST", "/workers", {"name": "p", "types": [t]})
        # Another namespace's job is not found, as if it did not exist.
        other = admin.submit(t, namespace="default")
        with self.assertRaises(jetflow.NotFound):
            producer.get(other.id)
        self.assertEqual([j.id for j in producer.list(type=t)], [job.id])

        # The worker token runs its namespace's jobs, and only those.
        w = jetflow.Worker(AUTH_URL, name="authw", token=wtok.token, claim_wait=5)

        @w.task(t)
        def square(j):
            return {"ns": j.namespace, "sq": j.payload["n"] ** 2}
        w.start()
        try:
            done = producer.wait(job.id, timeout=15)
            self.assertEqual((done.state, done.result), ("succeeded", {"ns": ns, "sq": 4}))
            self.assertEqual(admin.get(other.id).state, "queued")
            self.assertEqual(w.registration["namespace"], ns)
        finally:
            w.stop(grace=0)
        with self.assertRaises(jetflow.Forbidden):
            jetflow.Client(AUTH_URL, token=wtok.token).submit(t)
        admin.cancel(other.id)

        # A revoked token is refused from then on.
        admin.revoke_token(prod.id)
        with self.assertRaises(jetflow.Unauthorized):
            producer.get(job.id)
        with self.assertRaises(jetflow.UnknownToken) as cm:
            admin.revoke_token("01JAAAAAAAAAAAAAAAAAAAAAAA")
        self.assertEqual(cm.exception.status, 404)

    def test_worker_without_a_token_stops_with_unauthorized(self):
        w = jetflow.Worker(AUTH_URL, name="notoken", claim_wait=5)
        w.task(unique("x"))(lambda job: None)
        with self.assertRaises(jetflow.Unauthorized):
            w.start()
