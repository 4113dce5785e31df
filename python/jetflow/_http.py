"""The HTTP transport: one connection per request (so any thread may call),
JSON in and out, problem answers raised as exceptions, multipart uploads
streamed from disk, Server-Sent Events read line by line, and calls that
another thread can abort (a worker's long polls on shutdown)."""

import http.client
import json
import os
import socket
import ssl
import threading
import urllib.parse
import uuid

from . import errors

API = "/api/v1"
CHUNK = 64 * 1024


def dumps(value):
    """Compact JSON; NaN and infinities are refused (the API takes JSON)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class Call:
    """A handle on one request in flight: abort() from any thread ends it
    (the socket is shut down; the caller sees ConnectionFailed)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._conn = None
        self.aborted = False

    def _attach(self, conn):
        with self._lock:
            if self.aborted:
                return False
            self._conn = conn
            return True

    def _detach(self):
        with self._lock:
            self._conn = None

    def abort(self):
        with self._lock:
            self.aborted = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise errors.ProtocolError("answer %d is not JSON: %s" % (self.status, e), status=self.status) from None


class Multipart:
    """A multipart/form-data body: the job's JSON first, then one part per
    file, streamed (files are read in chunks while sending)."""

    def __init__(self, job, files):
        self.boundary = "jetflow-" + uuid.uuid4().hex
        self.parts = []  # (head bytes, data bytes | path)
        head = ('--%s\r\nContent-Disposition: form-data; name="job"\r\n'
                "Content-Type: application/json\r\n\r\n" % self.boundary).encode()
        self.parts.append((head, dumps(job).encode()))
        for name, data in files:
            head = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; %s\r\n"
                    "Content-Type: application/octet-stream\r\n\r\n" % (self.boundary, _filename_param(name))).encode()
            self.parts.append((head, data))
        self.tail = ("--%s--\r\n" % self.boundary).encode()

    @property
    def content_type(self):
        return "multipart/form-data; boundary=" + self.boundary

    def __len__(self):
        n = len(self.tail)
        for head, data in self.parts:
            n += len(head) + 2
            n += len(data) if isinstance(data, (bytes, bytearray)) else os.path.getsize(data)
        return n

    def __iter__(self):
        for head, data in self.parts:
            yield head
            if isinstance(data, (bytes, bytearray)):
                yield bytes(data)
            else:
                with open(data, "rb") as f:
                    while True:
                        b = f.read(CHUNK)
                        if not b:
                            break
                        yield b
            yield b"\r\n"
        yield self.tail


def _filename_param(name):
    try:
        name.encode("ascii")
    except UnicodeEncodeError:
        return "filename*=UTF-8''" + urllib.parse.quote(name, safe="")
    if any(c in name for c in "\r\n"):
        return "filename*=UTF-8''" + urllib.parse.quote(name, safe="")
    return 'filename="%s"' % name.replace("\\", "\\\\").replace('"', '\\"')


class Transport:
    def __init__(self, base_url, token=None, timeout=30.0, user_agent="jetflow-python"):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("base_url %r: want http://host:port or https://host:port" % base_url)
        self.base_url = base_url.rstrip("/")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port
        self.prefix = u.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.user_agent = user_agent

    def url(self, path, query=None, root=False):
        full = self.prefix + ("" if root else API) + path
        if query:
            q = {}
            for k, v in query.items():
                if v is None:
                    continue
                q[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
            if q:
                full += "?" + urllib.parse.urlencode(q)
        return full

    def _connect(self, timeout):
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def open(self, method, path, query=None, body=None, headers=None, timeout=None, call=None, root=False):
        """Sends a request and returns (connection, response) with the body
        unread; the caller closes the connection. An error answer is raised."""
        h = {"User-Agent": self.user_agent, "Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        data = body
        if body is not None and not isinstance(body, (bytes, Multipart)) and not hasattr(body, "read"):
            data = dumps(body).encode()
            h["Content-Type"] = "application/json"
        if isinstance(data, Multipart):
            h["Content-Type"] = data.content_type
            h["Content-Length"] = str(len(data))
        elif isinstance(data, bytes):
            h.setdefault("Content-Type", "application/octet-stream")
        elif hasattr(data, "read"):  # a binary file, sent from where it stands
            h.setdefault("Content-Type", "application/octet-stream")
            h["Content-Length"] = str(os.fstat(data.fileno()).st_size - data.tell())
        if headers:
            h.update(headers)
        conn = self._connect(self.timeout if timeout is None else timeout)
        if call is not None and not call._attach(conn):
            raise errors.ConnectionFailed("request aborted")
        try:
            conn.connect()
            if call is not None and call.aborted:
                raise errors.ConnectionFailed("request aborted")
            conn.request(method, self.url(path, query, root), body=data, headers=h)
            res = conn.getresponse()
        except errors.JetflowError:
            conn.close()
            if call is not None:
                call._detach()
            raise
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            if call is not None:
                call._detach()
            what = "request aborted" if call is not None and call.aborted else "%s %s: %s" % (method, path, e)
            raise errors.ConnectionFailed(what) from None
        if res.status >= 400:
            try:
                raw = res.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                conn.close()
                if call is not None:
                    call._detach()
            raise _problem(res, raw)
        return conn, res

    def request(self, method, path, query=None, body=None, headers=None, timeout=None, call=None, root=False):
        conn, res = self.open(method, path, query, body, headers, timeout, call, root)
        try:
            raw = res.read()
        except (OSError, http.client.HTTPException) as e:
            what = "request aborted" if call is not None and call.aborted else "%s %s: %s" % (method, path, e)
            raise errors.ConnectionFailed(what) from None
        finally:
            conn.close()
            if call is not None:
                call._detach()
        return Response(res.status, res.headers, raw)


def _problem(res, raw):
    try:
        problem = json.loads(raw) if raw else {}
    except ValueError:
        problem = {"detail": raw.decode("utf-8", "replace")[:500]}
    return errors.error_from_problem(res.status, problem, res.headers)


class SSE:
    """Reads Server-Sent Events from a response: yields (event, id, data)."""

    def __init__(self, res):
        self.res = res

    def __iter__(self):
        event, eid, data = "", None, []
        while True:
            line = self.res.readline()
            if not line:
                return
            line = line.decode("utf-8", "replace").rstrip("\r\n")
            if line == "":
                if data or event:
                    yield (event or "message", eid, "\n".join(data))
                event, eid, data = "", None, []
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                eid = value
