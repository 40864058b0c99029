"""Small helpers for integration tests: real producers, real ledgers, polling with deadlines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pulsar

T = TypeVar("T")


def produce(service_url: str, topic: str, n: int, *, payload: bytes = b"x" * 100) -> None:
    """Send n messages one by one (batching off: one entry each, so the broker rolls a ledger per 5)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(n):
            producer.send(payload + str(i).encode())
        producer.flush()
        producer.close()
    finally:
        client.close()


def ml_ledger_ids(internal_stats: dict[str, Any]) -> list[int]:
    return [int(ld["ledgerId"]) for ld in internal_stats["ledgers"]]


async def eventually(
    check: Callable[[], Awaitable[T]], *, timeout: float = 60.0, interval: float = 0.5, what: str = "condition"
) -> T:
    """Poll ``check`` until it returns a truthy value; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")


def quiet_logger() -> Any:
    """The C++ client logs every connect at INFO; tests only want its warnings."""
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


class TcpProxy:
    """A loopback TCP proxy the test can cut and restore: a real network outage between the worker
    and a storage backend, without touching the backend itself."""

    def __init__(self, target_host: str, target_port: int) -> None:
        import socket
        import threading

        self.target = (target_host, target_port)
        self._lsock = socket.socket()
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind(("127.0.0.1", 0))
        self.port = int(self._lsock.getsockname()[1])
        self._open = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = False
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._lsock.listen(64)
        self._lsock.settimeout(0.2)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        self._open.set()

    def down(self) -> None:
        """Refuse new connections and cut the live ones."""
        self._open.clear()
        with self._lock:
            for c in self._conns:
                try:
                    c.close()
                except OSError:
                    pass
            self._conns.clear()

    def close(self) -> None:
        self._stop = True
        self.down()
        self._thread.join(timeout=5)
        self._lsock.close()

    def _accept_loop(self) -> None:
        import socket
        import threading

        while not self._stop:
            try:
                client, _ = self._lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._open.is_set():
                client.close()  # the outage: connection accepted, then dropped with nothing said
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: Any, dst: Any) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass


def count_from_earliest(service_url: str, topic: str, timeout_ms: int = 5000) -> int:
    """How many messages a reader gets from the earliest position: proof the ledgers are readable."""
    client = pulsar.Client(service_url, logger=quiet_logger())
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        n = 0
        while reader.has_message_available():
            reader.read_next(timeout_millis=timeout_ms)
            n += 1
        reader.close()
        return n
    finally:
        client.close()
