"""Spreading bookie HTTP calls: which endpoint the next call goes to (pure), and the settings' list."""

from __future__ import annotations

import pytest

from worker.backends.bookie_http import BookieEndpoint, pick_endpoint
from worker.settings import BookKeeperSettings


def eps(*inflight: int) -> list[BookieEndpoint]:
    return [BookieEndpoint(f"http://b{i}:8000", n) for i, n in enumerate(inflight)]


def test_least_busy_first_ties_to_the_first_listed() -> None:
    assert pick_endpoint(eps(0, 0), now=10).url == "http://b0:8000"
    assert pick_endpoint(eps(1, 0), now=10).url == "http://b1:8000"
    assert pick_endpoint(eps(2, 1, 1), now=10).url == "http://b1:8000"


def test_a_bookie_marked_down_is_skipped_until_its_mark_expires() -> None:
    e = eps(3, 0)
    e[1].down_until = 20
    assert pick_endpoint(e, now=10).url == "http://b0:8000"
    assert pick_endpoint(e, now=20).url == "http://b1:8000"


def test_every_bookie_down_tries_the_one_down_longest() -> None:
    e = eps(0, 0, 0)
    e[0].down_until, e[1].down_until, e[2].down_until = 30, 15, 25
    assert pick_endpoint(e, now=10).url == "http://b1:8000"


def test_excluded_endpoints_are_not_retried_while_others_remain() -> None:
    e = eps(0, 5)
    assert pick_endpoint(e, now=0, exclude={"http://b0:8000"}).url == "http://b1:8000"
    # Everything excluded: any endpoint rather than none (the caller bounds its own attempts).
    assert pick_endpoint(e, now=0, exclude={"http://b0:8000", "http://b1:8000"}).url == "http://b0:8000"


def test_settings_list_every_bookie_once_in_order() -> None:
    s = BookKeeperSettings.model_validate(
        {"http_url": "http://b1:8000/", "http_urls": ["http://b2:8000", "http://b1:8000", "http://b3:8000/"]}
    )
    assert s.endpoints == ["http://b1:8000", "http://b2:8000", "http://b3:8000"]
    assert BookKeeperSettings().endpoints == ["http://127.0.0.1:8000"]


def test_a_bad_bookie_url_is_refused_with_its_key() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="http_urls"):
        BookKeeperSettings.model_validate({"http_urls": ["not a url"]})
