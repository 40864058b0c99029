"""TLS on the auth profile: host names are verified on both endpoints, and the token never travels over
plain http when the admin URL is https.

A certificate "for another host" is one the test's own CA signed for ``other.invalid``, presented by a
TLS relay on 127.0.0.1 in front of the real broker's plain port: the chain is trusted (the client's
bundle holds that CA), only the name is wrong. The plain-http recorder passes each request on to the
broker's plain port 8085, so a token that reached it would have worked - which is the danger."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pulsar
import pytest
from aiohttp import web

from testkit.admin import StagingAdmin
from tests.auth.conftest import AuthStack
from tests.auth.tls_helpers import (
    LocalCA,
    Recorded,
    broker_tls,
    bundle,
    forward,
    front_app,
    make_ca,
    recorder_app,
    serve,
    server_context,
    tls_relay,
)
from worker.broker.admin import admin_session
from worker.broker.client import blocking_client
from worker.errors import BackendError
from worker.formats.topic_name import TopicName
from worker.settings import PulsarSettings


@pytest.fixture
def test_ca(tmp_path: Path) -> LocalCA:
    return make_ca(tmp_path / "ca")


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port


def _settings(auth_stack: AuthStack, trust: Path, **kw: object) -> PulsarSettings:
    return PulsarSettings.model_validate(
        {
            "service_url": auth_stack.service_url,
            "admin_url": auth_stack.admin_url,
            "auth_token": auth_stack.token("admin"),
            "tls_trust_certs_file": str(trust),
            "request_timeout_s": 5,
            **kw,
        }
    )


def _send_one(p: PulsarSettings, topic: str) -> None:
    client = blocking_client(p)
    try:
        producer = client.create_producer(topic)
        producer.send(b"tls")
        producer.close()
    finally:
        client.close()


def test_binary_protocol_refuses_a_certificate_for_another_host(
    auth_stack: AuthStack, test_ca: LocalCA, tmp_path: Path
) -> None:
    cert, key = test_ca.issue("other", "DNS:other.invalid")
    trust = bundle(tmp_path / "trust.pem", auth_stack.ca, test_ca.cert)
    topic = f"persistent://public/default/tls-{uuid.uuid4().hex[:8]}"
    with tls_relay(cert, key, _port(auth_stack.service_url)) as port:
        wrong = _settings(auth_stack, trust, service_url=f"pulsar+ssl://127.0.0.1:{port}")
        with pytest.raises(pulsar.PulsarException):
            _send_one(wrong, topic)
        # The same relay with the check explicitly (and unsafely) off: the refusal was the host name's.
        _send_one(wrong.model_copy(update={"tls_insecure_skip_hostname_verification": True}), topic)
    # The broker's own certificate names 127.0.0.1: accepted.
    _send_one(_settings(auth_stack, auth_stack.ca, service_url=auth_stack.service_url_tls), topic)


async def test_admin_refuses_a_certificate_for_another_host(
    auth_stack: AuthStack, test_ca: LocalCA, tmp_path: Path
) -> None:
    cert, key = test_ca.issue("other", "DNS:other.invalid")
    trust = bundle(tmp_path / "trust.pem", auth_stack.ca, test_ca.cert)
    with tls_relay(cert, key, _port(auth_stack.admin_url_plain)) as port:
        wrong = _settings(auth_stack, trust, admin_url=f"https://127.0.0.1:{port}")
        async with admin_session(wrong) as s:
            with pytest.raises(BackendError, match=r"certificate|hostname"):
                await StagingAdmin(str(wrong.admin_url), s, wrong.auth_token).list_tenants()
        unsafe = wrong.model_copy(update={"tls_insecure_skip_hostname_verification": True})
        async with admin_session(unsafe) as s:
            assert "public" in await StagingAdmin(str(unsafe.admin_url), s, unsafe.auth_token).list_tenants()


@pytest.fixture
def topic(auth_stack: AuthStack) -> TopicName:
    t = TopicName.parse(f"persistent://public/default/tls-{uuid.uuid4().hex[:8]}")
    auth_stack.rest("PUT", f"/admin/v2/{t.rest_path}")
    return t


async def test_an_https_lookup_never_falls_back_to_plain_http(
    auth_stack: AuthStack, test_ca: LocalCA, tmp_path: Path, topic: TopicName
) -> None:
    """A lookup answer without ``httpUrlTls`` (an https ingress in front of plain-http brokers): the
    owner is not asked over ``httpUrl`` with the token."""
    cert, key = test_ca.issue("front", "IP:127.0.0.1")
    trust = bundle(tmp_path / "trust.pem", auth_stack.ca, test_ca.cert)
    recorded = Recorded()
    async with serve(recorder_app(recorded, auth_stack.admin_url_plain)) as rec_port:

        async def lookup_without_tls(request: web.Request) -> web.StreamResponse | None:
            if not request.path.startswith("/lookup/v2/"):
                return None
            real = await forward(request, auth_stack.admin_url, broker_tls(auth_stack.ca))
            assert real.body is not None
            d = json.loads(bytes(real.body))  # type: ignore[arg-type]
            d.pop("httpUrlTls", None)
            d["httpUrl"] = f"http://127.0.0.1:{rec_port}"
            return web.json_response(d)

        front = front_app(auth_stack.admin_url, auth_stack.ca, lookup_without_tls)
        async with serve(front, server_context(cert, key)) as front_port:
            p = _settings(auth_stack, trust, admin_url=f"https://127.0.0.1:{front_port}")
            async with admin_session(p) as s:
                admin = StagingAdmin(str(p.admin_url), s, p.auth_token)
                with pytest.raises(BackendError) as e:
                    owner = await admin.lookup(topic)
                    await admin.internal_stats(topic, base=owner)
    assert recorded.with_credentials == [], f"the token went over plain http: {recorded.requests}"
    assert "httpUrlTls" in str(e.value), e.value


async def test_a_redirect_from_https_to_plain_http_is_refused(
    auth_stack: AuthStack, test_ca: LocalCA, tmp_path: Path, topic: TopicName
) -> None:
    """A 307 to http:// - on a lookup hop or on a call that follows the owner - is a transient error
    naming the downgrade, and nothing is sent there."""
    cert, key = test_ca.issue("front", "IP:127.0.0.1")
    trust = bundle(tmp_path / "trust.pem", auth_stack.ca, test_ca.cert)
    recorded = Recorded()
    async with serve(recorder_app(recorded, auth_stack.admin_url_plain)) as rec_port:

        async def downgrade(request: web.Request) -> web.StreamResponse | None:
            if request.path.startswith("/lookup/v2/") or request.path.endswith("/subscriptions"):
                raise web.HTTPTemporaryRedirect(f"http://127.0.0.1:{rec_port}{request.path_qs}")
            return None

        front = front_app(auth_stack.admin_url, auth_stack.ca, downgrade)
        async with serve(front, server_context(cert, key)) as front_port:
            p = _settings(auth_stack, trust, admin_url=f"https://127.0.0.1:{front_port}")
            async with admin_session(p) as s:
                admin = StagingAdmin(str(p.admin_url), s, p.auth_token)
                errors = []
                for call in (admin.lookup(topic), admin.subscriptions(topic)):
                    try:
                        await call
                    except BackendError as e:
                        errors.append(str(e))
    assert recorded.with_credentials == [], f"the token went over plain http: {recorded.requests}"
    assert len(errors) == 2, errors
    assert all(f"http://127.0.0.1:{rec_port}" in m and "plain http" in m for m in errors), errors
