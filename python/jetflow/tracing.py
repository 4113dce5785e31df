"""W3C trace context (https://www.w3.org/TR/trace-context/) for jetflow
jobs, standard library only: a submit sends ``traceparent`` and
``tracestate`` headers, the server keeps them with the job, and a worker's
handler finds them as ``job.traceparent`` / ``job.tracestate``
(docs/tracing.md).

While a Worker runs a handler, the handler's trace context is the current
one (``current()``): a ``Client.submit`` or ``retry`` made in the handler's
thread (or in its coroutine) without a ``traceparent`` of its own continues
the job's trace. A thread the handler starts itself does not inherit it
(contextvars): pass ``traceparent=job.traceparent`` there.
"""

import contextlib
import contextvars
import re

__all__ = ["current", "use", "headers", "MAX_TRACESTATE"]

# The W3C limits: a traceparent of a known or a future version (the
# server reads version 00 and ignores what it cannot), and a tracestate of
# at most 32 members; more than MAX_TRACESTATE bytes are cut by the server.
MAX_TRACESTATE = 512
_MAX_TRACESTATE_IN = 8192  # what is sent at all
_TRACEPARENT = re.compile(r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}(-[\x21-\x7e]*)?")
_TRACESTATE = re.compile(r"[\x20-\x7e]*")

_current = contextvars.ContextVar("jetflow_trace_context", default=None)


def current():
    """The trace context of the running handler as ``(traceparent,
    tracestate)``, or None outside a handler (or in one whose job has no
    trace context)."""
    return _current.get()


@contextlib.contextmanager
def use(traceparent, tracestate=None):
    """Makes ``traceparent`` (and its ``tracestate``) the current trace
    context in this thread or coroutine for the ``with`` block: what the
    Worker does around a handler, usable by a caller that keeps its own
    trace (``with jetflow.tracing.use(tp): client.submit(...)``). A
    traceparent of None clears it for the block."""
    if traceparent is not None:
        _check(traceparent, tracestate)
    token = _current.set((traceparent, tracestate or None) if traceparent else None)
    try:
        yield
    finally:
        _current.reset(token)


def headers(traceparent=None, tracestate=None):
    """The headers of a submit: those of ``traceparent`` and ``tracestate``
    when given, else of the current trace context (``current()``), else
    none. A traceparent that is not W3C, or a tracestate without one or
    not printable ASCII within 8192 bytes, raises ValueError (nothing is
    sent)."""
    if traceparent is None:
        if tracestate is not None:
            raise ValueError("tracestate without a traceparent")
        cur = _current.get()
        if cur is None:
            return None
        traceparent, tracestate = cur
    _check(traceparent, tracestate)
    h = {"traceparent": traceparent}
    if tracestate:
        h["tracestate"] = tracestate
    return h


def _check(traceparent, tracestate):
    if not isinstance(traceparent, str) or not _TRACEPARENT.fullmatch(traceparent):
        raise ValueError("traceparent %r: want a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)" % (traceparent,))
    if tracestate is not None:
        if not isinstance(tracestate, str) or len(tracestate) > _MAX_TRACESTATE_IN or \
                not _TRACESTATE.fullmatch(tracestate):
            raise ValueError("tracestate: want printable ASCII of at most %d bytes" % _MAX_TRACESTATE_IN)
