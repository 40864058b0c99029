"""Small helpers for integration tests: real producers, real ledgers, polling with deadlines."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pulsar

from testkit.topics import count_from_earliest, eventually, ml_ledger_ids, produce

__all__ = ["count_from_earliest", "eventually", "ml_ledger_ids", "produce", "quiet_logger"]


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
        # Added before every chunk the server sends back: a slow server, as its clients see it.
        self.delay_s = 0.0
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
            for a, b, answers in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pipe, args=(a, b, answers), daemon=True).start()

    def _pipe(self, src: Any, dst: Any, answers: bool) -> None:
        import time

        try:
            while data := src.recv(65536):
                if answers and self.delay_s:
                    time.sleep(self.delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass


class HttpProxy:
    """A loopback HTTP proxy in front of a real server (the broker's admin API, a bookie's HTTP API).

    It forwards every request unchanged, records what it forwarded, and answers instead of the server
    where a test installs a fault: ``proxy.fault(lambda method, path: (status, body) or None)``. The
    worker talks to the real server through it; only the answers a test names are replaced.
    """

    def __init__(self, upstream: str) -> None:
        import threading

        from aiohttp import ClientSession, web

        self.upstream = upstream.rstrip("/")
        self.requests: list[tuple[str, str]] = []
        self._faults: list[Callable[[str, str], tuple[int, str] | None]] = []
        self._stalls: list[Callable[[str, str], float | None]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0

        async def handle(request: web.Request) -> web.StreamResponse:
            path_qs = request.path_qs
            self.requests.append((request.method, path_qs))
            for fault in list(self._faults):
                answer = fault(request.method, path_qs)
                if answer is not None:
                    status, body = answer
                    return web.Response(status=status, text=body, content_type="text/plain")
            for stall in list(self._stalls):
                seconds = stall(request.method, path_qs)
                if seconds:
                    await asyncio.sleep(seconds)
            assert self._session is not None
            async with self._session.request(
                request.method,
                f"{self.upstream}{path_qs}",
                data=await request.read(),
                headers={k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")},
                allow_redirects=False,
            ) as r:
                body = await r.read()
                headers = {k: v for k, v in r.headers.items() if k.lower() in ("content-type", "location")}
                return web.Response(status=r.status, body=body, headers=headers)

        async def start() -> None:
            self._session = ClientSession()
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handle)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
            self._ready.set()

        self._session: ClientSession | None = None

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("HTTP proxy did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fault(self, f: Callable[[str, str], tuple[int, str] | None]) -> None:
        self._faults.append(f)

    def stall(self, f: Callable[[str, str], float | None]) -> None:
        """Hold matching requests for the seconds ``f`` answers before forwarding them (a slow backend)."""
        self._stalls.append(f)

    def clear_faults(self) -> None:
        self._faults.clear()
        self._stalls.clear()

    def paths(self, contains: str) -> list[str]:
        return [p for _, p in self.requests if contains in p]

    def close(self) -> None:
        async def stop() -> None:
            await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
