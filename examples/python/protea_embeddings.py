#!/usr/bin/env python3
"""PROTEA-style protein embeddings on jetflow.

A coordinator job splits its sequences into GPU batches and fans them out;
each batch runs on the "gpu" queue and writes its embeddings; the parent
job closes when the last batch finishes. In PROTEA a write worker did that
by hand (progress_current += 1; close the parent when it reaches
progress_total); here jetflow's fan-in counts the pieces and completes the
parent exactly once, and its progress is the batches finished.

When the GPU is busy (another embedding run still has batches in flight),
the coordinator raises RetryLater: the job runs again after the delay, and
no retry is spent (PROTEA's RetryLaterError).

    python -m jetflow worker protea_embeddings:worker --url http://127.0.0.1:8080
    python protea_embeddings.py --url http://127.0.0.1:8080 submit 20

Batches and fan-out from a Python worker need a server with WIRE-19's
fan-out and batches for HTTP workers.
"""

import argparse
import hashlib
import json
import math
import os
import pathlib
import random
import sys

import jetflow

COORDINATOR = "protea.compute_embeddings"
BATCH = "protea.embed_batch"
DIM = 8

# Where batches write their embeddings (shared storage in a real setup).
OUT = pathlib.Path(os.environ.get("PROTEA_OUT", "protea-embeddings"))

worker = jetflow.Worker(name="protea", concurrency=4)


def gpu_busy(job):
    """Another embedding run whose batches are still in flight, if any."""
    for other in worker.client.list(type=job.type, state="waiting"):
        if other.id != job.id:
            return other.id
    return None


@worker.task(COORDINATOR)
def compute_embeddings(job):
    busy = gpu_busy(job)
    if busy:
        raise jetflow.RetryLater(job.payload.get("busy_delay", 30), "GPU busy: embedding run %s" % busy)
    seqs = job.payload["sequences"]
    size = int(job.payload.get("batch_size", 16))
    batches = [{"run": job.id, "sequences": seqs[i:i + size]} for i in range(0, len(seqs), size)]
    job.event("coordinator.planned", "%d sequences in %d batches" % (len(seqs), len(batches)),
              fields={"sequences": len(seqs), "batches": len(batches)})
    # The job waits for its batches; it is not succeeded here (PROTEA's
    # OperationResult(deferred=True)).
    return jetflow.FanOut(batches=jetflow.Batches(BATCH, batches, queue="gpu", max_retries=3, timeout=600))


def embed(seq):
    """A stand-in for the model: a deterministic unit vector of the sequence."""
    h = hashlib.sha256(seq.encode()).digest()
    v = [b - 127.5 for b in h[:DIM]]
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [round(x / n, 6) for x in v]


@worker.batch(BATCH)
def embed_batch(batch):
    vectors = {}
    for s in batch.payload["sequences"]:
        batch.check()  # stop between sequences if the run was cancelled
        vectors[s["id"]] = embed(s["seq"])
    out = OUT / batch.payload["run"]
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (".batch-%04d.json" % batch.piece)
    tmp.write_text(json.dumps(vectors, sort_keys=True))
    tmp.replace(out / ("batch-%04d.json" % batch.piece))  # a retried batch rewrites the same file


def sequences(n, seed=1):
    rnd = random.Random(seed)
    return [{"id": "P%05d" % i, "seq": "".join(rnd.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(30))}
            for i in range(n)]


def submit(client, seqs, batch_size=16, timeout=None):
    """Submits a run and waits for it; returns the parent job."""
    job = client.submit(COORDINATOR, {"sequences": seqs, "batch_size": batch_size})
    return client.wait(job.id, timeout=timeout)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("JETFLOW_URL", jetflow.DEFAULT_URL))
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit", help="submit N random sequences and wait")
    s.add_argument("n", type=int)
    s.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args(argv)
    done = submit(jetflow.Client(args.url), sequences(args.n), args.batch_size)
    print(json.dumps({"id": done.id, "state": done.state, "result": done.result}))
    return 0 if done.state == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
