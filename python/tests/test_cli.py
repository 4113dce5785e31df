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
        p = self.spawn("file_job:worker", "--url", URL, "--concurrency", "2", "--name", name, "--grace", "0.5")
        w = wait_until(lambda: next((x for x in c.workers() if x.name == name), None), timeout=20,
                       what="the worker registered")
        self.assertEqual((w.concurrency, w.kind, w.types, w.live), (2, "http", ["orchestrator.run"], True))

        tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        (tmp / "run.sh").write_text('echo "$JETFLOW_JOB_ID" > "$JETFLOW_OUTPUT/id.txt"\n')
        job = c.submit("orchestrator.run", files=[tmp / "run.sh"])
        done = c.wait(job.id, timeout=20)
        self.assertEqual((done.state, done.worker), ("succeeded", w.id))
        archive = zipfile.ZipFile(io.BytesIO(c.download(job.id)))
        self.assertEqual(archive.read("out/id.txt"), (job.id + "\n").encode())

        # SIGTERM: no more claims; the running job gets the grace, then is
        # given back to its queue, and the worker unregisters and exits 0.
        (tmp / "run.sh").write_text("sleep 60\n")
        slow = c.submit("orchestrator.run", files=[tmp / "run.sh"])
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
