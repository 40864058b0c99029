"""The kazoo handler that keeps its selectors: same answers as kazoo's stock ``select``, on real sockets."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from kazoo.handlers.utils import selector_select

from worker.backends.zookeeper import ReusedSelectorHandler


@pytest.fixture
def handler() -> Iterator[ReusedSelectorHandler]:
    h = ReusedSelectorHandler()
    yield h
    h._close_kept()


def test_readable_and_writable_like_kazoos_select(handler: ReusedSelectorHandler) -> None:
    a, b = socket.socketpair()
    r, w = socket.socketpair()
    try:
        assert handler.select([a, r], [], [], 0) == ([], [], [])
        assert selector_select([a, r], [], [], 0) == ([], [], [])
        b.send(b"x")
        assert handler.select([a, r], [], [], 1) == ([a], [], [])
        assert selector_select([a, r], [], [], 1) == ([a], [], [])
        assert handler.select([], [a], [], 1) == ([], [a], [])
        w.send(b"y")
        assert handler.select([a, r], [], [], 1) == ([a, r], [], [])
        a.recv(1)
        assert handler.select([a, r], [], [], 1) == ([r], [], [])
    finally:
        for s in (a, b, r, w):
            s.close()


def test_one_selector_per_polled_set_and_reused(handler: ReusedSelectorHandler) -> None:
    a, b = socket.socketpair()
    try:
        for _ in range(5):
            handler.select([a], [], [], 0)
            handler.select([], [a], [], 0)
            handler.select([a, b], [], [], 0)
        assert len(handler._kept) == 3
        first = {k: v[0] for k, v in handler._kept.items()}
        handler.select([a], [], [], 0)
        assert {k: v[0] for k, v in handler._kept.items()} == first
    finally:
        a.close()
        b.close()


def test_a_new_socket_on_a_reused_descriptor_number_is_polled(handler: ReusedSelectorHandler) -> None:
    """A reconnect closes the old socket; the new one often gets the same descriptor number. epoll forgot
    the old registration when it was closed, so a kept selector would never report the new socket."""
    a, b = socket.socketpair()
    fd = a.fileno()
    handler.select([a], [], [], 0)
    a.close()
    b.close()
    c, d = socket.socketpair()
    try:
        if c.fileno() != fd:
            c, d = d, c
        d.send(b"z")
        assert handler.select([c], [], [], 1) == ([c], [], [])
    finally:
        c.close()
        d.close()


def test_closed_socket_is_the_error_kazoo_expects(handler: ReusedSelectorHandler) -> None:
    a, b = socket.socketpair()
    a.close()
    b.close()
    with pytest.raises(ValueError):
        handler.select([a], [], [], 0)


def test_bounded_number_of_kept_selectors(handler: ReusedSelectorHandler) -> None:
    socks = [socket.socketpair() for _ in range(ReusedSelectorHandler.MAX_KEPT + 3)]
    try:
        for a, _ in socks:
            handler.select([a], [], [], 0)
        assert len(handler._kept) <= ReusedSelectorHandler.MAX_KEPT
    finally:
        for a, b in socks:
            a.close()
            b.close()
