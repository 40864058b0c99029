"""One kazoo client per ensemble, on a handler that keeps its epoll selectors between polls (kazoo's
default builds, registers and closes a fresh one on every poll, a large share of a busy process's CPU).

Kazoo runs its I/O on its own threads. Every call goes through kazoo's ``*_async`` API, its result is
handed to the event loop by a callback (no executor thread per call) and awaited with a timeout, so a
lost ZooKeeper connection surfaces as :class:`BackendError` instead of a stuck task.
"""

from __future__ import annotations

import selectors
from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import selector_select


class ReusedSelectorHandler(SequentialThreadingHandler):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's threading handler, polling with a kept selector instead of a new one per poll.

    kazoo's connection thread polls its socket for every request and reply, and its stock ``select``
    builds, registers and closes a fresh epoll selector each time, which shows in a profile of any process
    busy with ZooKeeper (bench/results/LOG.md, the ZooKeeper route's profile). A selector is kept per set of
    (file object, events) the connection polls (three sets per connection). The file objects themselves are
    the keys, so a reconnect's new socket can never be mistaken for a closed one that had the same descriptor number."""

    MAX_KEPT = 8
    # Not closed in stop(): kazoo may stop the handler while its connection thread is still in a poll.
    # The selectors go with the handler (an epoll object closes when collected).

    def __init__(self) -> None:
        super().__init__()
        # key -> (selector, the descriptors registered in it, in key order)
        self._kept: dict[tuple[tuple[Any, int], ...], tuple[selectors.BaseSelector, list[int]]] = {}

    def select(self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None) -> Any:
        key = tuple((o, selectors.EVENT_READ) for o in rlist) + tuple((o, selectors.EVENT_WRITE) for o in wlist)
        fds = [_fd(o) for o, _ in key]
        if xlist or len(set(fds)) != len(fds):
            return selector_select(rlist, wlist, xlist, timeout)  # shapes kazoo's connection never polls
        kept = self._kept.get(key)
        if kept is None or kept[1] != fds:
            if kept is not None:
                kept[0].close()
            elif len(self._kept) >= self.MAX_KEPT:
                self._close_kept()
            sel = selectors.DefaultSelector()
            try:
                for fd, (_, ev) in zip(fds, key, strict=True):
                    sel.register(fd, ev)
            except (ValueError, OSError) as e:
                sel.close()
                raise ValueError("Invalid event mask or fd") from e
            kept = self._kept[key] = (sel, fds)
        ready = {k.fd: ev for k, ev in kept[0].select(timeout)}
        # fds are in key order: the read list's objects first, then the write list's.
        return (
            [o for o, fd in zip(rlist, fds, strict=False) if ready.get(fd, 0) & selectors.EVENT_READ],
            [o for o, fd in zip(wlist, fds[len(rlist) :], strict=True) if ready.get(fd, 0) & selectors.EVENT_WRITE],
            [],
        )

    def _close_kept(self) -> None:
        for sel, _ in self._kept.values():
            sel.close()
        self._kept.clear()


def _fd(o: Any) -> int:
    fd = o if isinstance(o, int) else o.fileno()
    if fd < 0:
        raise ValueError("Invalid event mask or fd")
    return int(fd)


def kazoo_client(hosts: str, timeout_s: float) -> KazooClient:
    """A KazooClient on :class:`ReusedSelectorHandler`."""
    return KazooClient(hosts=hosts, timeout=timeout_s, handler=ReusedSelectorHandler())
