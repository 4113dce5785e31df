"""Errors of the jetflow HTTP API, mapped from its problem types.

Every error answer of the API is an RFC 9457 problem (docs/http.md,
"Problem types"); its ``type`` is a stable slug, mapped here to one exception
class. Every class is a :class:`JetflowError` carrying ``.status``,
``.slug``, ``.detail`` and ``.problem`` (the problem object as it came).
"""

__all__ = [
    "JetflowError", "ConnectionFailed", "ProtocolError",
    "InvalidInput", "MalformedRequest", "BadCursor", "InvalidNamespace", "InvalidWorkflow", "InvalidCategory",
    "InvalidTypeName", "InvalidFileName",
    "NotFound", "UnknownType", "UnknownToken", "NoArchive", "Gone", "MethodNotAllowed",
    "InvalidTransition", "NotClaimant", "Conflict", "SchemaConflict", "TypeLimit", "ConcurrencyLimit",
    "SchemaViolation", "InvalidSchema", "RegistrationTooLarge",
    "Unauthorized", "Forbidden", "UserNotAllowed", "CrossOrigin", "InternalType",
    "TooLarge", "Overloaded", "Unavailable", "ServerTimeout", "InternalError",
    "NotEnded", "WaitTimeout", "error_from_problem",
]


class JetflowError(Exception):
    """An error of the jetflow API.

    ``status`` is the HTTP status (``None`` for errors of the client side),
    ``slug`` the problem's ``type``, ``detail`` its explanation and
    ``problem`` the whole problem object (a dict; empty when the answer was
    not a problem).
    """

    slug = None

    def __init__(self, detail="", status=None, slug=None, problem=None, headers=None):
        super().__init__(detail)
        self.detail = detail
        self.status = status
        if slug is not None:
            self.slug = slug
        self.problem = dict(problem or {})
        self.headers = headers

    @property
    def title(self):
        return self.problem.get("title")

    @property
    def field(self):
        """The refused field of the request, when the problem names one."""
        return self.problem.get("field")

    @property
    def job_id(self):
        return self.problem.get("job_id")

    @property
    def worker_id(self):
        return self.problem.get("worker_id")

    @property
    def instance(self):
        return self.problem.get("instance")

    def __str__(self):
        head = " ".join(str(x) for x in (self.status, self.slug) if x is not None)
        return "%s: %s" % (head, self.detail) if head else str(self.detail)


class ConnectionFailed(JetflowError):
    """The server could not be reached, or the connection broke."""

    slug = "connection-failed"


class ProtocolError(JetflowError):
    """The server answered something that is not what the API answers."""

    slug = "protocol-error"


# 400


class InvalidInput(JetflowError):
    """400 invalid-input: a value is refused; ``.field`` names it."""

    slug = "invalid-input"


class MalformedRequest(InvalidInput):
    """400 malformed-request: the body is not the JSON object the route takes."""

    slug = "malformed-request"


class BadCursor(InvalidInput):
    """400 bad-cursor: a list cursor the API did not hand out."""

    slug = "bad-cursor"


class InvalidNamespace(InvalidInput):
    slug = "invalid-namespace"


class InvalidWorkflow(InvalidInput):
    """400 invalid-workflow: a cycle, an unknown or repeated step name; the
    detail names the steps."""

    slug = "invalid-workflow"


class InvalidCategory(InvalidInput):
    slug = "invalid-category"


class InvalidTypeName(InvalidInput):
    slug = "invalid-type-name"


class InvalidFileName(InvalidInput):
    slug = "invalid-file-name"


# 404, 405, 410


class NotFound(JetflowError):
    """404 not-found: no such job, worker, queue or route."""

    slug = "not-found"


class UnknownType(NotFound):
    slug = "unknown-type"


class UnknownToken(NotFound):
    slug = "unknown-token"


class NoArchive(NotFound):
    """404 no-archive: the job ended without a result archive."""

    slug = "no-archive"


class Gone(JetflowError):
    """410 gone: the job was purged by retention (``.purged_at``)."""

    slug = "gone"

    @property
    def purged_at(self):
        return self.problem.get("purged_at")


class MethodNotAllowed(JetflowError):
    slug = "method-not-allowed"


# 409


class InvalidTransition(JetflowError):
    """409 invalid-transition: the job's lifecycle refuses the move; ``.state``
    is the state it was refused in."""

    slug = "invalid-transition"

    @property
    def state(self):
        return self.problem.get("state")


class NotClaimant(JetflowError):
    """409 not-claimant: the worker does not hold the job (any more)."""

    slug = "not-claimant"


class Conflict(JetflowError):
    """409 conflict: a write lost a race too many times; retry."""

    slug = "conflict"


class SchemaConflict(Conflict):
    """409 schema-conflict: the type is active with another schema."""

    slug = "schema-conflict"


class TypeLimit(Conflict):
    slug = "type-limit"


class ConcurrencyLimit(JetflowError):
    """409 concurrency-limit: the worker holds as many claims as its concurrency."""

    slug = "concurrency-limit"


# 422


class SchemaViolation(JetflowError):
    """422 schema-violation: the payload does not satisfy its type's schema;
    ``.violations`` lists each as ``{"pointer", "message"}``."""

    slug = "schema-violation"

    @property
    def violations(self):
        return list(self.problem.get("violations") or [])


class InvalidSchema(JetflowError):
    slug = "invalid-schema"


class RegistrationTooLarge(JetflowError):
    slug = "registration-too-large"


# 401, 403


class Unauthorized(JetflowError):
    """401 unauthenticated: no token, or one that is unknown, revoked or expired."""

    slug = "unauthenticated"


class Forbidden(JetflowError):
    """403 forbidden: the token's role may not do this, or names another namespace."""

    slug = "forbidden"


class UserNotAllowed(Forbidden):
    slug = "user-not-allowed"


class CrossOrigin(Forbidden):
    slug = "cross-origin"


class InternalType(Forbidden):
    slug = "internal-type"


# 413, 5xx


class TooLarge(JetflowError):
    """413 payload-too-large: the body (or the upload) is over the limit."""

    slug = "payload-too-large"


class Overloaded(JetflowError):
    """503 overloaded: the gateway holds its maximum of open streams;
    ``.retry_after`` is the seconds it asks to wait."""

    slug = "overloaded"

    @property
    def retry_after(self):
        try:
            return float(self.headers.get("Retry-After")) if self.headers is not None else None
        except (TypeError, ValueError):
            return None


class Unavailable(JetflowError):
    """503 unavailable: the gateway's index is still loading, or NATS is unreachable."""

    slug = "unavailable"


class ServerTimeout(JetflowError):
    """504 timeout: NATS did not answer the gateway in time."""

    slug = "timeout"


class InternalError(JetflowError):
    slug = "internal"


# Client side.


class NotEnded(JetflowError):
    """A download of a job that has not ended yet (202); ``.job`` is the job."""

    slug = "not-ended"

    def __init__(self, detail, job=None, **kw):
        super().__init__(detail, **kw)
        self.job = job


class WaitTimeout(JetflowError, TimeoutError):
    """Client.wait: the job was not terminal when the timeout passed;
    ``.job`` is the job as it was then."""

    slug = "wait-timeout"

    def __init__(self, detail, job=None):
        super().__init__(detail)
        self.job = job


_CLASSES = [
    InvalidInput, MalformedRequest, BadCursor, InvalidNamespace, InvalidWorkflow, InvalidCategory, InvalidTypeName,
    InvalidFileName, NotFound, UnknownType, UnknownToken, NoArchive, Gone, MethodNotAllowed,
    InvalidTransition, NotClaimant, Conflict, SchemaConflict, TypeLimit, ConcurrencyLimit,
    SchemaViolation, InvalidSchema, RegistrationTooLarge, Unauthorized, Forbidden, UserNotAllowed,
    CrossOrigin, InternalType, TooLarge, Overloaded, Unavailable, ServerTimeout, InternalError,
]
BY_SLUG = {c.slug: c for c in _CLASSES}
_BY_STATUS = {400: InvalidInput, 401: Unauthorized, 403: Forbidden, 404: NotFound, 405: MethodNotAllowed,
              410: Gone, 413: TooLarge, 500: InternalError, 503: Unavailable, 504: ServerTimeout}


def error_from_problem(status, problem, headers=None):
    """The exception for an error answer: by the problem's ``type`` slug, or
    by the status when the slug is unknown (or the body is no problem)."""
    if not isinstance(problem, dict):
        problem = {}
    slug = problem.get("type")
    cls = BY_SLUG.get(slug) or _BY_STATUS.get(status) or JetflowError
    detail = problem.get("detail") or problem.get("title") or "HTTP %d" % status
    return cls(detail, status=status, slug=slug, problem=problem, headers=headers)
