"""The jetflow HTTP client: submit jobs, read them, wait for them, follow
their events, cancel and retry them, download their result archives, and
manage the registry of job types (docs/http.md)."""

import datetime
import http.client
import json
import math
import os
import time
import urllib.parse

from . import errors, tracing
from ._http import SSE, Multipart, Transport

__all__ = ["Client", "Record", "JobInfo", "Event", "Page", "TERMINAL", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:8080"
TERMINAL = ("succeeded", "failed", "cancelled")
MAX_WAIT = 60  # the server caps Prefer: wait (gateway.Config.MaxWait)


class Record(dict):
    """A JSON object of the API with attribute access: ``rec.state`` is
    ``rec["state"]``, and a field the server left out reads as None."""

    __slots__ = ()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self.get(name)

    def __setattr__(self, name, value):
        raise AttributeError("%s is read-only; use item assignment" % type(self).__name__)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, dict.__repr__(self))


class JobInfo(Record):
    """A job as the API returns it (docs/http.md, "The job object"):
    ``.id``, ``.state``, ``.type``, ``.payload``, ``.result``, ``.error``,
    ``.progress``, ``.fanout``, ``.attempts``, ..."""

    __slots__ = ()

    @property
    def terminal(self):
        return self.get("state") in TERMINAL


class Event(Record):
    """One event of a job's history: ``.seq``, ``.type``, ``.time``,
    ``.attempt``, and as the type needs ``.name``, ``.level``, ``.message``,
    ``.fields``, ``.from``, ``.to``, ``.error``, ``.progress``, ``.counts``."""

    __slots__ = ()


class Page:
    """One page of a list: ``.jobs`` and ``.next_cursor`` (None on the last);
    of a list at an instant, ``.more``: whether more jobs matched than the
    limit (it has no cursor)."""

    def __init__(self, jobs, next_cursor, more=False):
        self.jobs = jobs
        self.next_cursor = next_cursor
        self.more = more

    def __iter__(self):
        return iter(self.jobs)

    def __len__(self):
        return len(self.jobs)


def duration(value, name="duration"):
    """A duration as the API takes it: seconds (int/float), a timedelta, or
    a Go duration string ("90s", "1m30s") passed as is."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise TypeError("%s: want seconds, a timedelta or a duration string, not a bool" % name)
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("%s: %r is not a duration" % (name, value))
        return int(value) if float(value).is_integer() else value
    raise TypeError("%s: want seconds, a timedelta or a duration string, not %s" % (name, type(value).__name__))


def timestamp(value, name="time"):
    """A time as RFC 3339: a datetime (naive means local time) or a string as is."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.astimezone()
        return value.isoformat()
    raise TypeError("%s: want a datetime or an RFC 3339 string, not %s" % (name, type(value).__name__))


def _upload_list(files):
    """Normalises submit(files=...) into [(name, bytes | path)]: a path (its
    base name; a directory: its regular files by their paths under it), a
    (name, bytes | path) pair, or a dict {name: bytes | path}."""
    if files is None:
        return []
    if isinstance(files, dict):
        files = list(files.items())
    out = []
    for f in files:
        if isinstance(f, tuple):
            if len(f) != 2:
                raise ValueError("a file is a path or a (name, bytes or path) pair, not %r" % (f,))
            name, data = f
            if isinstance(data, str):
                raise TypeError("file %r: give its content as bytes, or its path as a pathlib.Path" % name)
            if isinstance(data, (bytes, bytearray)):
                out.append((str(name), bytes(data)))
            elif isinstance(data, os.PathLike):
                out.append((str(name), os.fspath(data)))
            else:
                raise TypeError("file %r: want bytes or a path, not %s" % (name, type(data).__name__))
            continue
        path = os.fspath(f)
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs.sort()
                for n in sorted(names):
                    full = os.path.join(root, n)
                    if os.path.islink(full) or not os.path.isfile(full):
                        continue
                    out.append((os.path.relpath(full, path).replace(os.sep, "/"), full))
        else:
            out.append((os.path.basename(path), path))
    return out


class Client:
    """A client of a jetflow server's HTTP API.

    ``base_url`` defaults to $JETFLOW_URL, else http://127.0.0.1:8080;
    ``token`` (sent as ``Authorization: Bearer``) to $JETFLOW_TOKEN;
    ``namespace`` is the namespace submits go to and lists read when they
    name none; ``timeout`` is the socket timeout of a call, in seconds (long
    polls add their wait to it).
    """

    def __init__(self, base_url=None, token=None, namespace=None, timeout=30.0, user_agent="jetflow-python"):
        base_url = base_url or os.environ.get("JETFLOW_URL") or DEFAULT_URL
        if token is None:
            token = os.environ.get("JETFLOW_TOKEN") or None
        self.namespace = namespace
        self.timeout = timeout
        self._t = Transport(base_url, token=token, timeout=timeout, user_agent=user_agent)

    @property
    def base_url(self):
        return self._t.base_url

    @property
    def token(self):
        return self._t.token

    def __repr__(self):
        return "Client(%r, namespace=%r)" % (self.base_url, self.namespace)

    # Low level.

    def request(self, method, path, body=None, query=None, headers=None, timeout=None, call=None, root=False):
        """Calls a route of the API (``path`` under /api/v1 unless
        ``root``) and returns the decoded JSON answer; an error answer
        raises its JetflowError."""
        return self._t.request(method, path, query=query, body=body, headers=headers, timeout=timeout,
                               call=call, root=root).json()

    def _job(self, method, path, body=None, query=None, headers=None, timeout=None):
        return JobInfo(self.request(method, path, body, query, headers, timeout))

    # Jobs.

    def submit(self, type, payload=None, *, queue=None, delay=None, run_at=None, max_retries=None, backoff=None,
               backoff_cap=None, jitter=None, retry_on=None, no_retry_on=None, timeout=None, queue_timeout=None,
               max_lease_requeues=None, idempotency_key=None, priority=None, tags=None, namespace=None,
               parent=None, retry_of=None, user=None, files=None, traceparent=None, tracestate=None,
               unique_key=None, unique_fields=None, unique_for=None, unique_while=None, concurrency_key=None):
        """Submits a job and returns it (state ``queued``, ``scheduled`` or
        ``pending``). Durations are seconds, timedeltas or Go duration
        strings; ``run_at`` a datetime or an RFC 3339 string; ``files`` input
        files (paths, ``(name, bytes)`` or ``(name, path)`` pairs, or a dict),
        sent as a multipart upload. An ``idempotency_key`` that names an
        existing job returns that job. ``unique_key`` (or ``unique_fields``,
        payload field names its key is derived from) makes the job unique:
        while it holds its key (``unique_while``: "active", "not-succeeded"
        or "any"; ``unique_for``: a duration at most), a submit of the key
        returns it (docs/unique.md). ``concurrency_key`` groups jobs whose
        slots count together in a queue with ``max_running_per_key``
        (docs/quotas.md). ``traceparent`` and ``tracestate``
        (W3C) put the job in a trace; without them, a submit in a worker's
        handler continues its job's trace (jetflow.tracing)."""
        trace = tracing.headers(traceparent, tracestate)
        body = submit_body(type, payload, queue=queue, delay=delay, run_at=run_at, max_retries=max_retries,
                           backoff=backoff, backoff_cap=backoff_cap, jitter=jitter, retry_on=retry_on,
                           no_retry_on=no_retry_on, timeout=timeout, queue_timeout=queue_timeout,
                           max_lease_requeues=max_lease_requeues, idempotency_key=idempotency_key,
                           priority=priority, tags=tags, namespace=namespace or self.namespace, parent=parent,
                           retry_of=retry_of, user=user, unique_key=unique_key, unique_fields=unique_fields,
                           unique_for=unique_for, unique_while=unique_while, concurrency_key=concurrency_key)
        uploads = _upload_list(files)
        if uploads:
            return self._job("POST", "/jobs", Multipart(body, uploads), headers=trace, timeout=max(self.timeout, 300))
        return self._job("POST", "/jobs", body, headers=trace)

    def get(self, id, wait=None, at=None):
        """The job. With ``wait`` (seconds, at most 60), the server answers as
        soon as the job is terminal or when the wait passed (Prefer: wait).
        With ``at`` (a datetime or an RFC 3339 string), the job as it was
        then, folded from its events in the log (docs/audit.md); a job with
        no event by then raises NotFound."""
        if at is not None:
            if wait:
                raise TypeError("get: wait and at: a job as it was at an instant does not change")
            return self._job("GET", "/jobs/" + _seg(id), query={"at": _instant(at, "at")})
        if wait is None or wait <= 0:
            return self._whole(self._job("GET", "/jobs/" + _seg(id)))
        n = int(math.ceil(min(wait, MAX_WAIT)))
        return self._whole(self._job("GET", "/jobs/" + _seg(id), headers={"Prefer": "wait=%d" % n},
                                     timeout=n + self.timeout))

    def _whole(self, job):
        """The job with its result read whole when it was too large for the
        job's record (``result_ref``: docs/workflows.md)."""
        if job.get("result_ref") and job.get("result") is None:
            job["result"] = self.result(job["id"])
        return job

    def result(self, id):
        """The result of a job that ended, decoded, whatever its size (GET
        /jobs/{id}/result); None when it ended without one. A job that has
        not ended raises NotEnded."""
        res = self._t.request("GET", "/jobs/" + _seg(id) + "/result")
        if res.status == 202:
            job = JobInfo(res.json())
            raise errors.NotEnded("job %s has not ended (%s)" % (id, job.get("state")), job=job, status=202)
        return res.json()

    def wait(self, id, timeout=None):
        """Waits until the job is terminal and returns it, with the server's
        long poll (Prefer: wait) asked again until then. With ``timeout``
        (seconds), raises WaitTimeout (``.job``: the job then) when it passes."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = MAX_WAIT if end is None else end - time.monotonic()
            if left < 1:
                # The server waits whole seconds: the last one is polled.
                job = self.get(id)
                if job.terminal:
                    return job
                if left <= 0:
                    raise errors.WaitTimeout("job %s is %s after %gs" % (id, job.state, timeout), job=job)
                time.sleep(min(0.1, left))
                continue
            try:
                job = self.get(id, wait=min(int(left), MAX_WAIT))
            except errors.Overloaded as e:
                pause = e.retry_after or 1.0
                if end is not None and time.monotonic() + pause >= end:
                    raise
                time.sleep(pause)
                continue
            if job.terminal:
                return job

    def cancel(self, id, reason=None):
        """Cancels the job (and its unfinished descendants); a terminal job is
        returned unchanged."""
        return self._job("POST", "/jobs/%s/cancel" % _seg(id), {"reason": reason} if reason else None)

    def purge_job(self, id, reason=None):
        """Purges a finished job and its children now (``job.purged``; the
        records and files are deleted, the events stay in the log) and
        returns how many jobs were purged. A job that is not finished raises
        InvalidTransition. Needs an admin token under access control."""
        body = {"reason": reason} if reason else None
        return self.request("POST", "/jobs/%s/purge" % _seg(id), body).get("purged", 0)

    def submit_workflow(self, steps, name=None, idempotency_key=None, on_failure=None, namespace=None):
        """Submits a workflow (docs/workflows.md): ``steps`` is a list of
        dicts, each ``{"name", "type", "payload", "depends_on": [names],
        ...any submit field}``. Returns the workflow's answer: ``.id`` (its
        job), ``.steps`` (step name -> job id) and ``.created``. A cycle or
        an unknown step raises InvalidWorkflow naming them."""
        body = {"steps": steps}
        for k, v in (("name", name), ("idempotency_key", idempotency_key), ("on_failure", on_failure),
                     ("namespace", namespace or self.namespace)):
            if v is not None:
                body[k] = v
        return Record(self.request("POST", "/workflows", body))

    def get_workflow(self, id):
        """The workflow's graph with each step's state: ``.state``,
        ``.steps`` (a list of step objects: name, job id, state,
        depends_on)."""
        return Record(self.request("GET", "/workflows/%s" % _seg(id)))

    def retry_workflow(self, id):
        """Resumes a failed or cancelled workflow from its failed steps."""
        return Record(self.request("POST", "/workflows/%s/retry" % _seg(id)))

    def reprioritize(self, id, priority):
        """Gives a job that has not started (pending, scheduled or queued)
        another priority, -1000 to 1000: a ``job.reprioritized`` event. In a
        queue with priorities a pending job takes its new place at once. The
        same priority again writes nothing; a job that started or ended
        raises InvalidTransition."""
        return self._job("POST", "/jobs/%s/priority" % _seg(id), {"priority": priority})

    def retry(self, id, idempotency_key=None, traceparent=None, tracestate=None, failed_pieces=False):
        """Submits a terminal job again (a new job, ``retry_of`` = id), in a
        trace as ``submit`` does. With ``failed_pieces`` (a fan-out), the new
        run's coordinator fans out again but only the pieces that did not
        succeed in ``id`` are made; the others are carried over as succeeded.
        The coordinator must fan out the same pieces in the same order (if
        its plan differs, every piece runs). A job that did not fan out, or
        whose pieces all succeeded, raises InvalidInput."""
        trace = tracing.headers(traceparent, tracestate)
        body = {}
        if idempotency_key:
            body["idempotency_key"] = idempotency_key
        if failed_pieces:
            body["failed_pieces"] = True
        body = body or None
        return self._job("POST", "/jobs/%s/retry" % _seg(id), body, headers=trace)

    def list_page(self, state=None, type=None, queue=None, namespace=None, parent=None, limit=None, cursor=None, at=None):
        """One page of jobs, newest first. With ``at`` (a datetime or an RFC
        3339 string), the jobs as the log had them then, in ``state`` (any
        without), the most recently moved first, at most ``limit`` (default
        100, at most 1000); ``.more`` says whether there were more (no
        cursor; ``parent`` and ``cursor`` are refused with ``at``)."""
        q = {"state": state, "type": type, "queue": queue, "namespace": namespace or self.namespace,
             "parent": parent, "limit": limit, "cursor": cursor}
        if at is not None:
            q["at"] = _instant(at, "at")
        out = self.request("GET", "/jobs", query=q)
        return Page([JobInfo(j) for j in out.get("jobs") or []], out.get("next_cursor"), bool(out.get("more")))

    def list(self, state=None, type=None, queue=None, namespace=None, parent=None, page_size=None, cursor=None, at=None):
        """Every job that matches, newest first: an iterator that follows the
        cursors page after page (``page_size`` jobs a request). With ``at``,
        the jobs at that instant (see list_page), at most ``page_size``
        (default 100): one request."""
        if at is not None:
            for j in self.list_page(state, type, queue, namespace, parent, page_size, cursor, at=at).jobs:
                yield j
            return
        while True:
            page = self.list_page(state, type, queue, namespace, parent, page_size, cursor)
            for j in page.jobs:
                yield j
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def children(self, id, state=None, type=None, queue=None, page_size=None, cursor=None):
        """The jobs whose parent is ``id``, newest first, following cursors."""
        while True:
            q = {"state": state, "type": type, "queue": queue, "limit": page_size, "cursor": cursor}
            out = self.request("GET", "/jobs/%s/children" % _seg(id), query=q)
            for j in out.get("jobs") or []:
                yield JobInfo(j)
            cursor = out.get("next_cursor")
            if not cursor:
                return

    def events(self, id, after=None, limit=None):
        """The job's history, oldest first (every page; ``after`` an event
        sequence: only later ones)."""
        out = []
        while True:
            page = self.request("GET", "/jobs/%s/events" % _seg(id), query={"after": after, "limit": limit})
            out.extend(Event(e) for e in page.get("events") or [])
            if not page.get("more"):
                return out
            after = page.get("next_after")

    def follow(self, id, after=None, timeout=None):
        """The job's events as they happen (the text/event-stream route): the
        history after ``after``, then each new event, ending after the
        job's terminal event. A broken stream is resumed where it left off.
        With ``timeout`` (seconds), raises WaitTimeout when it passes."""
        end = None if timeout is None else time.monotonic() + timeout
        retries = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if after:
                headers["Last-Event-ID"] = str(after)
            read_timeout = 30.0 if end is None else max(0.05, min(30.0, end - time.monotonic()))
            conn, res = self._t.open("GET", "/jobs/%s/events" % _seg(id), headers=headers, timeout=read_timeout)
            try:
                for event, eid, data in SSE(res):
                    retries = 0
                    if event == "end":
                        return
                    if event == "error":
                        raise errors.error_from_problem(500, _loads(data))
                    if event != "message":
                        continue
                    ev = Event(_loads(data))
                    after = ev.get("seq") or (int(eid) if eid and eid.isdigit() else after)
                    yield ev
                    if end is not None:
                        left = end - time.monotonic()
                        if left <= 0:
                            raise errors.WaitTimeout("following job %s: %gs passed" % (id, timeout))
                        conn.sock.settimeout(max(0.05, min(30.0, left)))
            except (OSError, ValueError) as e:
                if end is not None and time.monotonic() >= end:
                    raise errors.WaitTimeout("following job %s: %gs passed" % (id, timeout)) from None
                retries += 1
                if retries > 5:
                    raise errors.ConnectionFailed("following job %s: %s" % (id, e)) from None
                time.sleep(min(2.0, 0.1 * 2 ** retries))
                continue
            finally:
                conn.close()
            # the stream closed without its end (the gateway stopped): resume
            retries += 1
            if retries > 5:
                raise errors.ConnectionFailed("following job %s: the stream keeps closing" % id)
            time.sleep(min(2.0, 0.1 * 2 ** retries))

    # The audit of the event log (docs/audit.md).

    def audit_verify(self, namespace=None, queue=None, type=None, job=None, since=None, until=None, pubkey=None):
        """Verifies the hash chain and the signed checkpoints of the events
        of a scope of the log (every argument optional: the whole log, or
        the client's namespace when it has one), stored from ``since`` to
        ``until`` (datetimes or RFC 3339 strings), against ``pubkey`` (the
        checkpoint keys to trust, comma-separated; without: the keys the
        checkpoints name, which proves only that the log agrees with
        itself). Returns the report: ``.events``, ``.subjects``,
        ``.checkpoints``, ``.findings`` (each ``{"kind", "subject", "job",
        "seq", "what"}``; empty when nothing is wrong), ``.covered``,
        ``.uncovered``, ``.key``, ``.key_pinned``. A token of one namespace
        verifies that namespace only (another raises Forbidden, a job of
        another NotFound); a token of every namespace must be an admin's."""
        q = {"namespace": namespace or self.namespace, "queue": queue, "type": type, "job": job,
             "since": _instant(since, "since"), "until": _instant(until, "until"), "pubkey": pubkey}
        return Record(self.request("GET", "/audit/verify", query=q, timeout=max(self.timeout, 600)))

    def audit_pubkey(self):
        """The key that signs the log's checkpoints: ``.pubkey``, and
        ``.source``: "engine" (the key of the server's engine) or
        "checkpoint" (the key the newest checkpoint names, at
        ``.checkpoint_seq``: what the log claims). Keep it apart from the
        system and pass it to audit_verify. NotFound when there is none."""
        return Record(self.request("GET", "/audit/pubkey"))

    def audit_export(self, dest=None, since=None, until=None, namespace=None):
        """The export of the log (JSON Lines, docs/audit.md): the events
        stored from ``since`` to ``until`` of ``namespace`` (the client's;
        none: every one), their checkpoints and proofs, which ``jetflow audit
        verify --file`` checks offline. Its bytes, or written to ``dest`` (a
        path or a binary file object; returns ``dest``). An export cut short
        raises ConnectionFailed."""
        q = {"since": _instant(since, "since"), "until": _instant(until, "until"), "namespace": namespace or self.namespace}
        conn, res = self._t.open("GET", "/audit/export", query=q, timeout=max(self.timeout, 600),
                                 headers={"Accept": "application/x-ndjson"})
        try:
            return _save(res, dest)
        except (OSError, http.client.HTTPException) as e:
            raise errors.ConnectionFailed("audit export: %s" % e) from None
        finally:
            conn.close()

    # Files.

    def files(self, id):
        """The job's input files and outputs (``{"inputs", "outputs", "download"}``)."""
        return Record(self.request("GET", "/jobs/%s/files" % _seg(id)))

    def download(self, id, dest=None, wait=False, timeout=None):
        """The job's result archive (a zip): its bytes, or written to ``dest``
        (a path or a binary file object; returns ``dest``). A job that has
        not ended raises NotEnded unless ``wait``, which waits for it (up to
        ``timeout`` seconds); one that ended without an archive NoArchive."""
        if wait:
            self.wait(id, timeout=timeout)
        conn, res = self._t.open("GET", "/jobs/%s/download" % _seg(id), timeout=max(self.timeout, 300),
                                 headers={"Accept": "application/zip, application/json"})
        try:
            if res.status == 202:
                job = JobInfo(_loads(res.read()))
                raise errors.NotEnded("job %s has not ended (%s)" % (id, job.get("state")), job=job, status=202)
            return _save(res, dest)
        finally:
            conn.close()

    # Types, workers, queues, tokens.

    def types(self, namespace=None, deleted=False):
        """The registered types seen from ``namespace`` (its own and
        @global; every type when neither it nor the client names one)."""
        q = {"namespace": namespace or self.namespace, "deleted": True if deleted else None}
        return [Record(t) for t in self.request("GET", "/types", query=q).get("types") or []]

    def get_type(self, name):
        """One registered type by ``scope:category:name`` (or ``category:name``
        in the client's namespace, default ``default``)."""
        return Record(self.request("GET", "/types/" + self._type_path(name)))

    def register_type(self, name, schema=None, description=None):
        """Registers a type: ``scope:category:name``, or ``category:name`` in
        the client's namespace (default ``default``), with a JSON Schema
        (dict) of its payload. Registering it again with the same schema is
        a no-op; another schema of an active type raises SchemaConflict."""
        body = {}
        if schema is not None:
            body["schema"] = schema
        if description:
            body["description"] = description
        return Record(self.request("PUT", "/types/" + self._type_path(name), body))

    def _type_path(self, name):
        parts = name.split(":")
        if len(parts) == 2:
            parts = [self.namespace or "default"] + parts
        if len(parts) != 3 or not all(parts):
            raise ValueError("type %r: want scope:category:name or category:name" % name)
        return "/".join(urllib.parse.quote(p, safe="@") for p in parts)

    def namespaces(self):
        return [Record(n) for n in self.request("GET", "/namespaces").get("namespaces") or []]

    def workers(self):
        """The registered workers (HTTP and SDK)."""
        return [Record(w) for w in self.request("GET", "/workers").get("workers") or []]

    def queues(self):
        return [Record(q) for q in self.request("GET", "/queues").get("queues") or []]

    def create_token(self, name, role, namespace, ttl=None):
        """Creates an access token (admin only): ``role`` one of admin,
        producer, worker, reader; ``namespace`` one or ``"*"``. The answer's
        ``token`` is shown this once."""
        body = {"name": name, "role": role, "namespace": namespace}
        if ttl is not None:
            body["ttl"] = duration(ttl, "ttl")
        return Record(self.request("POST", "/tokens", body))

    def tokens(self):
        return [Record(t) for t in self.request("GET", "/tokens").get("tokens") or []]

    def revoke_token(self, id):
        return self.request("DELETE", "/tokens/" + _seg(id))

    def ready(self):
        """GET /readyz: True when the server is ready."""
        try:
            return self.request("GET", "/readyz", root=True).get("status") == "ready"
        except (errors.Unavailable, errors.ConnectionFailed):
            return False


def submit_body(type, payload=None, queue=None, delay=None, run_at=None, max_retries=None, backoff=None,
                backoff_cap=None, jitter=None, retry_on=None, no_retry_on=None, timeout=None, queue_timeout=None,
                max_lease_requeues=None, idempotency_key=None, priority=None, tags=None, namespace=None,
                parent=None, retry_of=None, user=None, unique_key=None, unique_fields=None, unique_for=None,
                unique_while=None, concurrency_key=None):
    """The body of POST /jobs (a submit request) from keyword options; left
    out options are left out of the body (the server's defaults apply)."""
    if not isinstance(type, str) or not type:
        raise TypeError("type: want a job type name")
    body = {"type": type}
    if payload is not None:
        body["payload"] = payload
    opts = {"queue": queue, "namespace": namespace, "max_retries": max_retries, "jitter": jitter,
            "max_lease_requeues": max_lease_requeues, "idempotency_key": idempotency_key, "priority": priority,
            "parent": parent, "retry_of": retry_of, "user": user, "unique_key": unique_key,
            "concurrency_key": concurrency_key,
            "unique_while": unique_while, "unique_for": duration(unique_for, "unique_for"),
            "delay": duration(delay, "delay"), "backoff": duration(backoff, "backoff"),
            "backoff_cap": duration(backoff_cap, "backoff_cap"), "timeout": duration(timeout, "timeout"),
            "queue_timeout": duration(queue_timeout, "queue_timeout"), "run_at": timestamp(run_at, "run_at")}
    for k, v in opts.items():
        if v is not None:
            body[k] = v
    for k, v in (("tags", tags), ("retry_on", retry_on), ("no_retry_on", no_retry_on), ("unique_fields", unique_fields)):
        if v is not None:
            if isinstance(v, str):
                raise TypeError("%s: want a list of strings, not a string" % k)
            body[k] = list(v)
    return body


def _instant(value, name):
    """An instant as the API takes it: RFC 3339. A naive datetime is local
    time; a string is passed as is (the server refuses a bad one, naming
    ``name``)."""
    if isinstance(value, datetime.datetime) and value.tzinfo is None:
        value = value.astimezone()
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    return timestamp(value, name)


def _seg(s):
    if not isinstance(s, str) or not s:
        raise TypeError("want an id, not %r" % (s,))
    return urllib.parse.quote(s, safe="")


def _loads(data):
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    try:
        return json.loads(data) if data else {}
    except ValueError:
        raise errors.ProtocolError("not JSON: %r" % data[:200]) from None


def _save(res, dest):
    """A response's body: its bytes (dest None), copied to a binary file
    object (returns it), or written to the path dest through dest.part,
    moved into place once whole (returns dest)."""
    if dest is None:
        return res.read()
    if hasattr(dest, "write"):
        _copy(res, dest)
        return dest
    tmp = os.fspath(dest) + ".part"
    with open(tmp, "wb") as f:
        _copy(res, f)
    os.replace(tmp, dest)
    return dest


def _copy(src, dst):
    while True:
        b = src.read(64 * 1024)
        if not b:
            return
        dst.write(b)

