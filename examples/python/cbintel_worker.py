#!/usr/bin/env python3
"""The worker side of the cbintel-style example: a crawl job that reports
progress page by page, an event per page, and stops at once when
cancelled.

    python -m jetflow worker cbintel_worker:worker --url http://127.0.0.1:8080
"""

import jetflow

worker = jetflow.Worker(name="cbintel", concurrency=2)


@worker.task("cbintel.crawl")
def crawl(job):
    urls = job.payload["urls"]
    pages = []
    job.progress(0, len(urls), "starting")
    for i, url in enumerate(urls, 1):
        job.sleep(job.payload.get("delay", 0.2))  # fetching: raises jetflow.Cancelled if the job is cancelled
        words = len(url.split("/"))  # a stand-in for fetching and parsing the page
        pages.append({"url": url, "words": words})
        job.event("crawl.page", url, fields={"words": words})
        job.progress(i, len(urls), "fetched %s" % url)
    return {"pages": pages}
