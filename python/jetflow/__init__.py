"""jetflow: a Python client and worker for jetflow, the event-sourced job
engine (standard library only).

    import jetflow

    client = jetflow.Client("http://127.0.0.1:8080")
    job = client.submit("img.resize", {"url": "..."}, max_retries=5, timeout=60)
    done = client.wait(job.id, timeout=120)

    worker = jetflow.Worker("http://127.0.0.1:8080", name="img", concurrency=4)

    @worker.task("img.resize")
    def resize(job):
        job.progress(1, 2, "fetched")
        return {"width": 640}

    worker.run()

See docs/python.md.
"""

import logging as _logging

from . import tracing
from .aio import AsyncClient
from .client import DEFAULT_URL, TERMINAL, Client, Event, JobInfo, Page, Record
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .worker import Batch, Batches, Cancelled, FanOut, Job, JobError, NotAStep, Permanent, RetryLater, Worker

__version__ = "0.1.0"

# A library logs, the application decides where to: nothing is printed
# unless logging is configured (python -m jetflow worker configures it).
_logging.getLogger("jetflow").addHandler(_logging.NullHandler())

__all__ = ["Client", "AsyncClient", "Worker", "Job", "Batch", "JobInfo", "Event", "Page", "Record",
           "RetryLater", "Permanent", "JobError", "Cancelled", "NotAStep", "FanOut", "Batches", "TERMINAL", "DEFAULT_URL",
           "__version__", "tracing"] + list(_errors_all)
