"""python -m jetflow worker module:worker, as its own process: flags,
running jobs, and a graceful stop on SIGTERM."""

import io
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

from tests.support import REPO, URL, ServerTest, unique, wait_until

EXAMPLES = os.path.join(REPO, "examples", "python")


class CLITest(ServerTest):
    def spawn(self, *args):
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), PYTHONDONTWRITEBYTECODE="1")
        p = subprocess.Popen([sys.executable, "-m", "jetflow", "worker"] + list(args), cwd=EXAMPLES, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def cleanup():
            if p.poll() is None:
                p.kill()
            p.communicate()
        self.addCleanup(cleanup)
        return p

    def test_worker_command(self):
        c = self.client
        name = unique("cli")
        q = name.replace(".", "-")  # a queue of this test's only
        p = self.spawn("file_job:worker", "--url", URL, "--concurrency", "2", "--name", name, "--grace", "0.5",
                       "--queues", q)
        w = wait_until(lambda: next((x for x in c.workers() if x.name == name), None), timeout=20,
                       what="the worker registered")
        self.assertEqual((w.concurrency, w.kind, w.types, w.queues, w.live),
                         (2, "http", ["orchestrator.run"], [q], True))

        tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        (tmp / "run.sh").write_text('echo "$JETFLOW_JOB_ID" > "$JETFLOW_OUTPUT/id.txt"\n')
        job = c.submit("orchestrator.run", files=[tmp / "run.sh"], queue=q)
        done = c.wait(job.id, timeout=20)
        self.assertEqual((done.state, done.worker), ("succeeded", w.id))
        archive = zipfile.ZipFile(io.BytesIO(c.download(job.id)))
        self.assertEqual(archive.read("out/id.txt"), (job.id + "\n").encode())

        # SIGTERM: no more claims; the running job gets the grace, then is
        # given back to its queue, and the worker unregisters and exits 0.
        (tmp / "run.sh").write_text("sleep 60\n")
        slow = c.submit("orchestrator.run", files=[tmp / "run.sh"], queue=q)
        self.wait_state(slow.id, "running")
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=20)
        self.assertEqual(p.returncode, 0, out.decode())
        self.assertLess(time.monotonic() - t0, 10)
        back = c.get(slow.id)
        self.assertEqual(back.state, "queued")
        self.assertEvents(slow.id, ["job.submitted", "job.claimed", "job.started", "job.requeued"])
        self.assertNotIn(w.id, [x.id for x in c.workers()])
        self.assertIn(b"given back (worker stopping)", out)
        self.assertIn(b"unregistered", out)
        c.cancel(slow.id)

    def test_second_signal_skips_the_grace(self):
        c = self.client
        name = unique("cli2")
        q = name.replace(".", "-")
        p = self.spawn("file_job:worker", "--url", URL, "--name", name, "--grace", "60", "--queues", q)
        wait_until(lambda: any(x.name == name for x in c.workers()), timeout=20, what="the worker registered")
        tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        (tmp / "run.sh").write_text("sleep 60\n")
        slow = c.submit("orchestrator.run", files=[tmp / "run.sh"], queue=q)
        self.wait_state(slow.id, "running")
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, b"")), daemon=True)
        reader.start()
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        # Two signals at once would be one: the second after the first is handled.
        wait_until(lambda: any(b"stopping (grace 60s)" in x for x in lines), what="the first signal handled")
        self.assertEqual(c.get(slow.id).state, "running")
        p.send_signal(signal.SIGINT)
        p.wait(timeout=20)
        reader.join(10)
        out = b"".join(lines)
        self.assertEqual(p.returncode, 0, out.decode())
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(c.get(slow.id).state, "queued")
        self.assertEvents(slow.id, ["job.submitted", "job.claimed", "job.started", "job.requeued"])
        self.assertIn(b"second signal", out)
        c.cancel(slow.id)

    def test_bad_targets(self):
        for args, msg in ((["no_such_module_x"], b"No module named"),
                          (["file_job:nothing"], b"has no nothing"),
                          (["file_job:TYPE"], b"not a jetflow.Worker"),
                          (["file_job:worker", "--concurrency", "0"], b"at least 1")):
            with self.subTest(args=args):
                p = self.spawn(*args)
                out, _ = p.communicate(timeout=20)
                self.assertEqual(p.returncode, 2, out)
                self.assertIn(msg, out)
