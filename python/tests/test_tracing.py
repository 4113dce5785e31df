"""W3C trace context: a submit in a trace, a handler that sees it and
continues it (docs/tracing.md). The server under test traces nothing
itself (no OTEL_*), so the context a handler gets is the job's own."""

import threading

import jetflow
from tests.support import ServerTest, unique

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TS = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"


def trace_id(tp):
    return tp.split("-")[1] if tp else None


class TracingTest(ServerTest):
    def test_submit_in_a_trace(self):
        c = self.client
        t = unique("trace")
        job = c.submit(t, {"x": 1}, traceparent=TP, tracestate=TS)
        self.assertEqual((job.traceparent, job.tracestate), (TP, TS))
        self.assertEqual((c.get(job.id).traceparent, c.get(job.id).tracestate), (TP, TS))
        plain = c.submit(t)
        self.assertEqual((plain.traceparent, plain.tracestate), (None, None))
        c.cancel(job.id)
        c.cancel(plain.id)
        again = c.retry(job.id, traceparent=TP)
        self.assertEqual((again.retry_of, again.traceparent), (job.id, TP))
        c.cancel(again.id)

    def test_bad_trace_context_sends_nothing(self):
        c = self.client
        t = unique("trace")
        for tp, ts in (("garbage", None), (TP.upper(), None), (TP + "\r\nX-Evil: 1", None),
                       ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", None), ("ff" + TP[2:], None),
                       (None, "a=b"), (TP, "a=b\n"), (TP, "k=" + "v" * 9000)):
            with self.assertRaises(ValueError, msg="%r %r" % (tp, ts)):
                c.submit(t, traceparent=tp, tracestate=ts)
        self.assertEqual(list(c.list(type=t)), [])

    def test_handler_sees_and_continues_its_trace(self):
        c = self.client
        t, follow, t_async = unique("trace"), unique("trace.next"), unique("trace.async")
        w = self.worker(concurrency=2)
        lock = threading.Lock()
        seen = {}

        @w.task(t)
        def run(job):
            with lock:
                seen[job.id] = (job.traceparent, job.tracestate, jetflow.tracing.current())
            nxt = c.submit(follow, {"from": job.id})  # no traceparent: the handler's
            return {"next": nxt.id}

        @w.task(t_async)
        async def run_async(job):
            with lock:
                seen[job.id] = (job.traceparent, job.tracestate, jetflow.tracing.current())

        w.start()
        traced = c.submit(t, traceparent=TP, tracestate=TS)
        plain = c.submit(t)
        traced_async = c.submit(t_async, traceparent=TP)
        done, done_plain = self.wait_done(traced.id), self.wait_done(plain.id)
        self.assertEqual((done.state, done_plain.state, self.wait_done(traced_async.id).state),
                         ("succeeded", "succeeded", "succeeded"))
        with lock:
            tp, ts, cur = seen[traced.id]
            self.assertEqual((trace_id(tp), ts, cur), (trace_id(TP), TS, (tp, ts)))
            self.assertEqual(seen[plain.id], (None, None, None))
            atp, _, acur = seen[traced_async.id]
            self.assertEqual((trace_id(atp), acur), (trace_id(TP), (atp, None)))
        nxt = c.get(done.result["next"])
        self.assertEqual((nxt.traceparent, nxt.tracestate), (tp, TS))
        self.assertIsNone(c.get(done_plain.result["next"]).traceparent)
        self.assertIsNone(jetflow.tracing.current())
