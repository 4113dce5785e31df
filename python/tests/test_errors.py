"""The mapping of problem types to exceptions (no server needed)."""

import unittest

import jetflow
from jetflow import errors

# Every problem type of docs/http.md, its status and its class.
TABLE = [
    ("malformed-request", 400, jetflow.MalformedRequest), ("invalid-input", 400, jetflow.InvalidInput),
    ("bad-cursor", 400, jetflow.BadCursor), ("cross-origin", 403, jetflow.CrossOrigin),
    ("not-found", 404, jetflow.NotFound), ("gone", 410, jetflow.Gone),
    ("method-not-allowed", 405, jetflow.MethodNotAllowed), ("payload-too-large", 413, jetflow.TooLarge),
    ("invalid-transition", 409, jetflow.InvalidTransition), ("not-claimant", 409, jetflow.NotClaimant),
    ("concurrency-limit", 409, jetflow.ConcurrencyLimit), ("conflict", 409, jetflow.Conflict),
    ("timeout", 504, jetflow.ServerTimeout), ("unavailable", 503, jetflow.Unavailable),
    ("overloaded", 503, jetflow.Overloaded), ("registration-too-large", 422, jetflow.RegistrationTooLarge),
    ("invalid-workflow", 400, jetflow.InvalidWorkflow), ("invalid-namespace", 400, jetflow.InvalidNamespace), ("invalid-category", 400, jetflow.InvalidCategory),
    ("invalid-type-name", 400, jetflow.InvalidTypeName), ("invalid-schema", 422, jetflow.InvalidSchema),
    ("schema-violation", 422, jetflow.SchemaViolation), ("schema-conflict", 409, jetflow.SchemaConflict),
    ("unknown-type", 404, jetflow.UnknownType), ("internal-type", 403, jetflow.InternalType),
    ("unauthenticated", 401, jetflow.Unauthorized), ("forbidden", 403, jetflow.Forbidden),
    ("unknown-token", 404, jetflow.UnknownToken), ("user-not-allowed", 403, jetflow.UserNotAllowed),
    ("invalid-file-name", 400, jetflow.InvalidFileName), ("no-archive", 404, jetflow.NoArchive),
    ("type-limit", 409, jetflow.TypeLimit), ("internal", 500, jetflow.InternalError),
]


class ErrorMappingTest(unittest.TestCase):
    def test_every_problem_type(self):
        for slug, status, cls in TABLE:
            with self.subTest(slug=slug):
                p = {"type": slug, "title": "T", "status": status, "detail": "d " + slug, "field": "f",
                     "job_id": "J", "worker_id": "W", "instance": "/api/v1/x"}
                e = errors.error_from_problem(status, p)
                self.assertIs(type(e), cls)
                self.assertIsInstance(e, jetflow.JetflowError)
                self.assertEqual((e.status, e.slug, e.detail, e.problem, e.field, e.job_id, e.worker_id, e.title,
                                  e.instance), (status, slug, "d " + slug, p, "f", "J", "W", "T", "/api/v1/x"))
                self.assertEqual(str(e), "%d %s: d %s" % (status, slug, slug))
                self.assertEqual(cls.slug, slug)

    def test_families(self):
        for cls in (jetflow.MalformedRequest, jetflow.BadCursor, jetflow.InvalidNamespace, jetflow.InvalidCategory,
                    jetflow.InvalidTypeName, jetflow.InvalidFileName):
            self.assertTrue(issubclass(cls, jetflow.InvalidInput), cls)
        for cls in (jetflow.UnknownType, jetflow.UnknownToken, jetflow.NoArchive):
            self.assertTrue(issubclass(cls, jetflow.NotFound), cls)
        for cls in (jetflow.UserNotAllowed, jetflow.CrossOrigin, jetflow.InternalType):
            self.assertTrue(issubclass(cls, jetflow.Forbidden), cls)
        for cls in (jetflow.SchemaConflict, jetflow.TypeLimit):
            self.assertTrue(issubclass(cls, jetflow.Conflict), cls)
        self.assertTrue(issubclass(jetflow.WaitTimeout, TimeoutError))

    def test_extras(self):
        e = errors.error_from_problem(422, {"type": "schema-violation", "violations": [
            {"pointer": "/a", "message": "m"}]})
        self.assertEqual(e.violations, [{"pointer": "/a", "message": "m"}])
        e = errors.error_from_problem(409, {"type": "invalid-transition", "state": "claimed"})
        self.assertEqual(e.state, "claimed")
        e = errors.error_from_problem(410, {"type": "gone", "purged_at": "2030-01-01T00:00:00Z"})
        self.assertEqual(e.purged_at, "2030-01-01T00:00:00Z")
        e = errors.error_from_problem(503, {"type": "overloaded"}, {"Retry-After": "1"})
        self.assertEqual(e.retry_after, 1.0)

    def test_unknown_slugs_and_bodies(self):
        e = errors.error_from_problem(404, {"type": "something-new", "detail": "x"})
        self.assertIs(type(e), jetflow.NotFound)
        self.assertEqual((e.slug, e.status), ("something-new", 404))
        e = errors.error_from_problem(418, {"type": "teapot"})
        self.assertIs(type(e), jetflow.JetflowError)
        e = errors.error_from_problem(502, {"detail": "<html>bad gateway</html>"})
        self.assertIs(type(e), jetflow.JetflowError)
        self.assertEqual((e.status, e.detail), (502, "<html>bad gateway</html>"))

    def test_connection_failed(self):
        c = jetflow.Client("http://127.0.0.1:1", timeout=2)
        with self.assertRaises(jetflow.ConnectionFailed) as cm:
            c.get("01JAAAAAAAAAAAAAAAAAAAAAAA")
        self.assertIsNone(cm.exception.status)
        self.assertFalse(c.ready())

    def test_outcomes(self):
        with self.assertRaises(ValueError):
            jetflow.RetryLater(-1)
        self.assertEqual(jetflow.RetryLater(5, "GPU busy").delay_seconds, 5)
        with self.assertRaises(ValueError):
            jetflow.FanOut()
        with self.assertRaises(ValueError):
            jetflow.FanOut(children=[{"type": "a"}], batches=jetflow.Batches("b", [1]))
        with self.assertRaises(ValueError):
            jetflow.FanOut(children=[{"type": "a", "parent": "x"}])
        with self.assertRaises(ValueError):
            jetflow.FanOut(children=[{"type": "a"}], failure_policy="some")
        f = jetflow.FanOut(batches=jetflow.Batches("embed.batch", [{"a": 1}], queue="gpu", max_retries=3,
                                                   backoff=5, timeout="10m"),
                           failure_policy="tolerate", max_failure_ratio=0.1, stall_timeout=3600)
        self.assertEqual(f.body(), {"batches": {"type": "embed.batch", "items": [{"a": 1}], "queue": "gpu",
                                                "max_retries": 3, "backoff": 5, "timeout": "10m"},
                                    "failure_policy": "tolerate", "max_failure_ratio": 0.1, "stall_timeout": 3600})
        self.assertEqual(jetflow.FanOut.child("t", {"x": 1}, timeout=1.5, tags=["a"]),
                         {"type": "t", "payload": {"x": 1}, "timeout": 1.5, "tags": ["a"]})
        self.assertTrue(issubclass(jetflow.Cancelled, BaseException))
        self.assertFalse(issubclass(jetflow.Cancelled, Exception))
