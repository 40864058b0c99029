"""The rule of which Pulsar policies would drop queued deletions (worker.core.queue_policies)."""

from __future__ import annotations

import pytest

from worker.core.queue_policies import EVICTION, TopicPolicies, dropping, evicting_quotas, unknown

T = "persistent://pulsar/system/__ledger_deletion"
SAFE_QUOTAS = {
    "destination_storage": {"limitSize": 10 * 2**30, "limitTime": -1, "policy": "producer_request_hold"},
    "message_age": {"limitSize": 10 * 2**30, "limitTime": -1, "policy": "producer_request_hold"},
}
SAFE_INACTIVE = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "deleteWhileInactive": True}


def policies(**kw: object) -> TopicPolicies:
    base: dict[str, object] = {
        "topic": T,
        "message_ttl_s": 0,
        "backlog_quotas": SAFE_QUOTAS,
        "inactive_topic": SAFE_INACTIVE,
    }
    return TopicPolicies(**{**base, **kw})  # type: ignore[arg-type]


def test_the_broker_defaults_drop_nothing() -> None:
    assert dropping([policies()], {"pulsar/system": 0}) == []


@pytest.mark.parametrize(
    ("kw", "expirations", "named"),
    [
        ({"message_ttl_s": 60}, {}, "messageTTL is 60 s"),
        ({}, {"pulsar/system": 30}, "subscriptionExpirationTime is 30 min on pulsar/system"),
        (
            {"backlog_quotas": {"destination_storage": {"limitSize": 0, "limitTime": -1, "policy": EVICTION}}},
            {},
            "backlogQuota destination_storage",
        ),
        (
            {"backlog_quotas": {"message_age": {"limitSize": -1, "limitTime": 3600, "policy": EVICTION}}},
            {},
            "backlogQuota message_age",
        ),
        (
            {
                "inactive_topic": {
                    "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
                    "deleteWhileInactive": True,
                }
            },
            {},
            "inactiveTopicPolicies",
        ),
    ],
)
def test_each_dropping_policy_is_named(kw: dict[str, object], expirations: dict[str, int | None], named: str) -> None:
    found = dropping([policies(**kw)], expirations)
    assert len(found) == 1 and named in found[0], found


def test_an_evicting_policy_without_a_limit_evicts_nothing() -> None:
    # The broker checks size only with limitSize >= 0 and age only with limitTime >= 0.
    quotas = {
        "destination_storage": {"limitSize": -1, "limitTime": 3600, "policy": EVICTION},
        "message_age": {"limitSize": 10, "limitTime": -1, "policy": EVICTION},
    }
    assert evicting_quotas(quotas) == []


def test_unreadable_policies_are_unknown_not_safe_nor_refused() -> None:
    p = policies(message_ttl_s=None, backlog_quotas=None, inactive_topic=None)
    assert dropping([p], {"pulsar/system": None}) == []
    assert unknown([p], {"pulsar/system": None}) == [
        "subscriptionExpirationTime on pulsar/system",
        f"messageTTL on {T}",
        f"backlogQuota on {T}",
        f"inactiveTopicPolicies on {T}",
    ]
