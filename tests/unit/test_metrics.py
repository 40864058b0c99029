"""The operators' metrics of both modules named ``metrics``: the backlog age and the decoded counter's labels
(``worker.metrics``) and the nightly jobs' pushed run metrics (``worker.nightly.metrics``)."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from worker.metrics import DECODED_LABEL_MAX_CHARS, decoded_labels, oldest_backlog_age_s
from worker.nightly import metrics as nm


def test_backlog_age_from_earliest_publish_time() -> None:
    sub = {"msgBacklog": 3, "earliestMsgPublishTimeInBacklog": 1_000_000}
    assert oldest_backlog_age_s(sub, now_ms=1_090_500) == 90.5


@pytest.mark.parametrize(
    "sub",
    [
        {},
        {"msgBacklog": 0, "earliestMsgPublishTimeInBacklog": 1_000_000},  # stale field of an empty backlog
        {"msgBacklog": 5, "earliestMsgPublishTimeInBacklog": 0},  # broker did not compute it
        {"msgBacklog": 5, "earliestMsgPublishTimeInBacklog": None},
    ],
)
def test_backlog_age_is_zero_when_unknown_or_empty(sub: dict[str, object]) -> None:
    assert oldest_backlog_age_s(sub, now_ms=2_000_000) == 0.0


def test_backlog_age_never_negative_on_clock_skew() -> None:
    assert oldest_backlog_age_s({"msgBacklog": 1, "earliestMsgPublishTimeInBacklog": 5_000}, now_ms=4_000) == 0.0


@pytest.mark.parametrize(
    ("properties", "labels"),
    [
        ({"source": "broker-extension", "broker": "b1", "pulsar_version": "4.0.8"}, ("broker-extension", "4.0.8")),
        ({"source": "broker-extension", "pulsar_version": "5.0.0-M1"}, ("broker-extension", "5.0.0-M1")),
        ({"source": "scanner", "scan_id": "s"}, ("scanner", "unknown")),  # this project's tools name no broker
        ({}, ("unknown", "unknown")),
        ({"source": "", "pulsar_version": ""}, ("unknown", "unknown")),
    ],
)
def test_decoded_labels_are_the_source_and_the_writers_pulsar_version(
    properties: dict[str, str], labels: tuple[str, str]
) -> None:
    assert decoded_labels(properties) == labels


def test_decoded_labels_are_cut_to_a_bounded_length() -> None:
    source, writer = decoded_labels({"source": "s" * 10_000, "pulsar_version": "4.0.8-" + "x" * 10_000})
    assert DECODED_LABEL_MAX_CHARS == 64
    assert source == "s" * 64
    assert writer == ("4.0.8-" + "x" * 10_000)[:64]


# ---- the nightly jobs' run metrics, pushed to the Pushgateway -------------------------------------------------


def test_successful_audit_run_carries_rows_orphans_and_success_time() -> None:
    reg = nm.run_registry(
        failed=False,
        duration_s=12.5,
        rows={"orphan": 4, "in_use": 9},
        orphans={"bookkeeper": (4, 2780)},
        finished_at=1e9,
    )
    text = generate_latest(reg).decode()
    assert f"{nm.FAILED} 0.0" in text
    assert f"{nm.LAST_SUCCESS} 1e+09" in text
    assert f'{nm.ROWS}{{outcome="orphan"}} 4.0' in text
    assert f'{nm.AUDIT_ORPHAN_BYTES}{{class="bookkeeper"}} 2780.0' in text
    assert f'{nm.AUDIT_ORPHAN_BYTES}{{class="tiered"}} 0.0' in text  # a zero is reported, not omitted


def test_audit_run_carries_the_bytes_held_past_retention_when_computed() -> None:
    text = generate_latest(nm.run_registry(failed=False, duration_s=1, held_past_retention_bytes=2818070)).decode()
    assert f"{nm.AUDIT_HELD_PAST_RETENTION_BYTES} 2.81807e+06" in text
    # Not computed (no metadata store, or it failed): no series rather than a zero that would read as a finding.
    text = generate_latest(nm.run_registry(failed=False, duration_s=1)).decode()
    assert nm.AUDIT_HELD_PAST_RETENTION_BYTES not in text


def test_failed_run_carries_no_success_time_and_no_rows() -> None:
    text = generate_latest(nm.run_registry(failed=True, duration_s=3, rows={"deleted": 1})).decode()
    assert f"{nm.FAILED} 1.0" in text
    assert nm.LAST_SUCCESS not in text and nm.ROWS not in text


def test_push_refuses_an_unknown_job_name() -> None:
    with pytest.raises(ValueError, match="unknown nightly job"):
        nm.push("127.0.0.1:1", "ledger_deletion_other", nm.run_registry(failed=True, duration_s=0))
