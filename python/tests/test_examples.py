"""The examples (examples/python) against a real server."""

import contextlib
import importlib
import io
import json
import os
import pathlib
import shutil
import sys
import tempfile
import zipfile

from tests.support import REPO, URL, ServerTest, requires

EXAMPLES = os.path.join(REPO, "examples", "python")


def example(name):
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    return importlib.import_module(name)


class ExamplesTest(ServerTest):
    def start(self, w, **kw):
        w.configure(base_url=URL, **kw)
        w.claim_wait = 5
        w.start()
        self.addCleanup(w.stop, 0)

    def test_cbintel_client_prints_progress(self):
        worker = example("cbintel_worker").worker
        client = example("cbintel_client")
        self.start(worker)
        payload = json.dumps({"urls": ["https://a.example/x", "https://b.example/y/z"], "delay": 0.05})
        out = io.StringIO()
        self.assertEqual(client.main(["--url", URL, "cbintel.crawl", payload], out=out), 0)
        lines = out.getvalue().splitlines()
        job_id = lines[0].split()[1]
        self.assertEqual(lines[0], "submitted " + job_id)
        self.assertEqual(lines[-1], 'succeeded: {"pages": [{"url": "https://a.example/x", "words": 4}, '
                                    '{"url": "https://b.example/y/z", "words": 5}]}')
        self.assertEqual(lines[-2], "[2/2] fetched https://b.example/y/z")  # the last progress always shows
        # Pages 0.3 s apart: every progress report is written (at most one
        # per 250 ms is), so the stream shows each.
        payload = json.dumps({"urls": ["https://a.example/x", "https://b.example/y/z"], "delay": 0.3})
        out = io.StringIO()
        self.assertEqual(client.main(["--url", URL, "--follow", "cbintel.crawl", payload], out=out), 0)
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[1:], ["running (attempt 1)", "[0/2] starting", "[1/2] fetched https://a.example/x",
                                     "[2/2] fetched https://b.example/y/z", lines[-1]])
        self.assertTrue(lines[-1].startswith("succeeded: "))
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(client.main(["--url", URL, "bad type!"], out=io.StringIO()), 2)
        self.assertTrue(err.getvalue().startswith("submit: 400 invalid-input: "), err.getvalue())

    def test_file_job(self):
        mod = example("file_job")
        self.start(mod.worker)
        tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        job = tmp / "job"
        (job / "data").mkdir(parents=True)
        (job / "run.sh").write_text('tr a-z A-Z < data/in.txt > "$JETFLOW_OUTPUT/out.txt"\necho done\necho warn >&2\n')
        (job / "data" / "in.txt").write_text("hello\n")
        done, dest = mod.submit_dir(self.client, job, tmp / "r.zip", timeout=30)
        self.assertEqual((done.state, done.result), ("succeeded", {"exit": 0, "outputs": ["out.txt"]}))
        z = zipfile.ZipFile(dest)
        self.assertEqual(sorted(z.namelist()), ["out/out.txt", "stderr.txt", "stdout.txt"])
        self.assertEqual((z.read("out/out.txt"), z.read("stdout.txt"), z.read("stderr.txt")),
                         (b"HELLO\n", b"done\n", b"warn\n"))
        # A failing run.sh fails the job, and its archive is kept.
        (job / "run.sh").write_text("echo partial > \"$JETFLOW_OUTPUT/p.txt\"\nexit 3\n")
        done, dest = mod.submit_dir(self.client, job, tmp / "f.zip", timeout=30)
        self.assertEqual((done.state, done.error["code"], done.attempts), ("failed", "EXIT_3", 1))
        self.assertEqual(zipfile.ZipFile(dest).read("out/p.txt"), b"partial\n")

    @requires("fanout", "batches")
    def test_protea_embeddings(self):
        mod = example("protea_embeddings")
        tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        mod.OUT = tmp
        self.start(mod.worker)
        seqs = mod.sequences(10)
        done = mod.submit(self.client, seqs, batch_size=4, timeout=60)
        self.assertEqual((done.state, done.result), ("succeeded", {"total": 3, "succeeded": 3, "failed": 0,
                                                                    "cancelled": 0}))
        files = sorted(p.name for p in (tmp / done.id).iterdir())
        self.assertEqual(files, ["batch-0001.json", "batch-0002.json", "batch-0003.json"])
        vectors = {}
        for f in files:
            vectors.update(json.loads((tmp / done.id / f).read_text()))
        self.assertEqual(sorted(vectors), [s["id"] for s in seqs])
        self.assertEqual(vectors["P00003"], mod.embed(seqs[3]["seq"]))
