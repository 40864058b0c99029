"""Loopback TLS pieces for the auth-profile TLS tests: a CA of the test's own, certificates it signs for a
chosen host name, a TLS-terminating relay in front of a real broker port, and a plain-http listener that
records every request that reaches it (and passes it on to the broker's plain port)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from aiohttp import web

T = TypeVar("T")


@dataclass(frozen=True)
class LocalCA:
    dir: Path
    cert: Path
    key: Path

    def issue(self, name: str, san: str) -> tuple[Path, Path]:
        """A server certificate signed by this CA for ``san`` (e.g. ``DNS:other.invalid``)."""
        key, csr, cert = (self.dir / f"{name}.{ext}" for ext in ("key.pem", "csr", "pem"))
        ext = self.dir / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(csr))
        _openssl(
            *("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key)),
            *("-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert)),
        )
        return cert, key


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(directory: Path) -> LocalCA:
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "test-ca.pem", directory / "test-ca.key.pem"
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ldw test CA"),
        *("-addext", "basicConstraints=critical,CA:TRUE", "-keyout", str(key), "-out", str(cert)),
    )
    return LocalCA(directory, cert, key)


def bundle(path: Path, *pems: Path) -> Path:
    """One PEM file trusting every CA given."""
    path.write_text("".join(p.read_text() for p in pems))
    return path


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


class LoopThread:
    """An asyncio loop in a thread: the servers keep serving while a test blocks (pulsar-client calls)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 30) -> T:
        async def wrap() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


@contextlib.contextmanager
def tls_relay(cert: Path, key: Path, backend_port: int) -> Iterator[int]:
    """A TLS server on a free loopback port presenting ``cert``, relaying the bytes to the plain port
    ``backend_port`` of the real broker. Yields its port."""
    lt = LoopThread()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            br, bw = await asyncio.open_connection("127.0.0.1", backend_port)
        except OSError:
            w.close()
            return
        await asyncio.gather(_pump(r, bw), _pump(br, w))

    async def start() -> asyncio.Server:
        return await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context(cert, key))

    async def close() -> None:
        server.close()  # in the loop's own thread: asyncio servers are not thread-safe

    server = lt.run(start())
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        lt.run(close())
        lt.stop()


@dataclass
class Recorded:
    """What reached the plain-http listener: (method, path, Authorization header or None) per request."""

    requests: list[tuple[str, str, str | None]] = field(default_factory=list)

    @property
    def with_credentials(self) -> list[tuple[str, str, str | None]]:
        return [r for r in self.requests if r[2]]


# Answers a request itself, or returns None to let the broker answer it.
Special = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


async def forward(request: web.Request, base: str, ssl_ctx: ssl.SSLContext | bool) -> web.Response:
    import aiohttp

    headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
    async with (
        aiohttp.ClientSession() as s,
        s.request(
            request.method,
            f"{base}{request.path_qs}",
            data=await request.read(),
            headers=headers,
            allow_redirects=False,
            ssl=ssl_ctx,
        ) as r,
    ):
        body = await r.read()
        out = {k: v for k, v in r.headers.items() if k.lower() in ("content-type", "location")}
        return web.Response(status=r.status, body=body, headers=out)


@contextlib.asynccontextmanager
async def serve(app: web.Application, ssl_ctx: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_ctx)
    await site.start()
    try:
        yield int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def recorder_app(recorded: Recorded, plain_base: str) -> web.Application:
    """Plain http: records each request, then lets the real broker's plain port answer it."""

    async def any_request(request: web.Request) -> web.StreamResponse:
        recorded.requests.append((request.method, request.path_qs, request.headers.get("Authorization")))
        return await forward(request, plain_base, False)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_request)
    return app


def broker_tls(broker_ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(broker_ca))


def front_app(tls_base: str, broker_ca: Path, special: Special) -> web.Application:
    """https in front of the real broker's TLS admin port: every request is answered by the broker,
    except those ``special`` answers, which stand for a misconfigured ingress or broker (a lookup answer
    without its https URL, a redirect to plain http)."""
    ctx = broker_tls(broker_ca)

    async def any_request(request: web.Request) -> web.StreamResponse:
        own = await special(request)
        return own if own is not None else await forward(request, tls_base, ctx)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_request)
    return app
