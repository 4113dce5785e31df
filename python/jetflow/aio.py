"""AsyncClient: the Client's calls as coroutines, each run in a thread
(asyncio.to_thread), so an asyncio program never blocks its loop."""

import asyncio
import functools

from .client import Client

__all__ = ["AsyncClient"]

_END = object()


class AsyncClient:
    """The same calls as Client, awaited: ``await client.submit(...)``;
    ``list``, ``children`` and ``follow`` are async iterators
    (``async for job in client.list(state="queued")``)."""

    def __init__(self, base_url=None, token=None, namespace=None, timeout=30.0, user_agent="jetflow-python"):
        self.sync = Client(base_url, token=token, namespace=namespace, timeout=timeout, user_agent=user_agent)

    def __repr__(self):
        return "AsyncClient(%r, namespace=%r)" % (self.sync.base_url, self.sync.namespace)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def list(self, *args, **kw):
        return _aiter(functools.partial(self.sync.list, *args, **kw))

    def children(self, *args, **kw):
        return _aiter(functools.partial(self.sync.children, *args, **kw))

    def follow(self, *args, **kw):
        return _aiter(functools.partial(self.sync.follow, *args, **kw))


def _wrap(name):
    fn = getattr(Client, name)

    @functools.wraps(fn)
    async def call(self, *args, **kw):
        return await asyncio.to_thread(getattr(self.sync, name), *args, **kw)
    return call


for _name in ("request", "submit", "get", "wait", "cancel", "purge_job", "reprioritize", "retry", "submit_workflow", "get_workflow", "retry_workflow", "list_page", "events", "files", "download", "audit_verify", "audit_pubkey", "audit_export",
              "types", "get_type", "register_type", "namespaces", "workers", "queues", "create_token", "tokens",
              "revoke_token", "ready"):
    setattr(AsyncClient, _name, _wrap(_name))


async def _aiter(make):
    it = await asyncio.to_thread(lambda: iter(make()))
    try:
        while True:
            item = await asyncio.to_thread(next, it, _END)
            if item is _END:
                return
            yield item
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            await asyncio.to_thread(close)
