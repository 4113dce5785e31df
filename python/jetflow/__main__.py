"""python -m jetflow worker module:worker [--url URL] [--concurrency N] [--name NAME]"""

import argparse
import importlib
import logging
import sys

from .worker import Worker


def find_worker(spec):
    """The Worker named by ``module:attribute`` (dots for nested
    attributes), or the one Worker among ``module``'s globals."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name:
        raise ValueError("%r: want module or module:worker" % spec)
    mod = importlib.import_module(mod_name)
    if attr:
        obj = mod
        for part in attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise ValueError("module %s has no %s" % (mod_name, attr))
        if not isinstance(obj, Worker):
            raise ValueError("%s is a %s, not a jetflow.Worker" % (spec, type(obj).__name__))
        return obj
    found = [v for v in vars(mod).values() if isinstance(v, Worker)]
    found = list({id(w): w for w in found}.values())
    if len(found) != 1:
        raise ValueError("module %s has %d jetflow.Worker objects: name one (module:worker)" % (mod_name, len(found)))
    return found[0]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m jetflow", description="jetflow for Python")
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker", help="run the jetflow.Worker of a module until SIGTERM/SIGINT")
    w.add_argument("target", help="module:worker (the Worker object), or module with exactly one Worker")
    w.add_argument("--url", help="the server (default: the Worker's, else $JETFLOW_URL, else http://127.0.0.1:8080)")
    w.add_argument("--token", help="access token (default: the Worker's, else $JETFLOW_TOKEN)")
    w.add_argument("--concurrency", type=int, help="handlers running at once")
    w.add_argument("--name", help="the worker's name")
    w.add_argument("--queues", help="comma-separated queues to serve (default: every queue)")
    w.add_argument("--namespace", help="the namespace its category:name types are registered in")
    w.add_argument("--grace", type=float, help="seconds running handlers get to finish on SIGTERM")
    w.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        worker = find_worker(args.target)
        if args.concurrency is not None and args.concurrency < 1:
            raise ValueError("--concurrency must be at least 1")
        worker.configure(base_url=args.url, name=args.name, concurrency=args.concurrency, token=args.token,
                         queues=[q for q in args.queues.split(",") if q] if args.queues else None,
                         namespace=args.namespace, grace=args.grace)
    except (ImportError, ValueError, RuntimeError) as e:
        print("python -m jetflow worker: %s" % e, file=sys.stderr)
        return 2
    try:
        worker.run()
    except Exception as e:  # noqa: BLE001
        print("python -m jetflow worker: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
