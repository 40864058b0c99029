"""Which bookie an HTTP endpoint is, and whether it is one of our cluster's (worker.core.bookie_identity)."""

from __future__ import annotations

import pytest

from worker.core.bookie_identity import bookie_id_from_config, why_not_ours


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"bookieId": "bk0test", "advertisedAddress": "127.0.0.1", "bookiePort": "3181"}, "bk0test"),
        ({"bookieId": "", "advertisedAddress": "127.0.0.1", "bookiePort": "3182"}, "127.0.0.1:3182"),
        ({"advertisedAddress": " bookie-0.bk.svc "}, "bookie-0.bk.svc:3181"),  # BookKeeper's default port
        ({"bookiePort": "3181", "useHostNameAsBookieID": "true"}, None),  # derived from the host: unknowable
        ({}, None),
    ],
)
def test_bookie_id_from_its_server_config(conf: dict[str, str], expected: str | None) -> None:
    assert bookie_id_from_config(conf) == expected


def test_a_bookie_belongs_when_its_id_is_registered() -> None:
    assert why_not_ours("bk0test", None, {"bk0test"}) is None
    why = why_not_ours("127.0.0.1:3182", None, {"bk0test"})
    assert why is not None and "'127.0.0.1:3182' is not registered" in why and "bk0test" in why


def test_its_cluster_view_is_used_only_without_an_id() -> None:
    # The own id decides even when the cluster views overlap.
    assert why_not_ours("a:1", {"b:1"}, {"b:1"}) is not None
    assert why_not_ours(None, {"b:1", "c:1"}, {"b:1"}) is None
    assert why_not_ours(None, {"x:1"}, {"b:1"}) is not None
    assert why_not_ours(None, set(), {"b:1"}) is not None
    assert why_not_ours(None, None, {"b:1"}) is not None
