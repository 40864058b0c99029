"""The replay-dlq command (``worker.commands.replay_dlq``): where the nightly jobs write their reports."""

from __future__ import annotations

from worker.commands.replay_dlq import report_dir
from worker.settings import load_settings


def test_report_dirs_of_both_jobs_stay_apart() -> None:
    s = load_settings(None, nightly={"report_dir": "s3a://bucket/reports/"})
    assert report_dir(None, s, "replay") == "s3a://bucket/reports/replay"
    assert report_dir("/tmp/r", s, "audit") == "/tmp/r/audit"
    assert report_dir("/tmp/r/", s, "replay") == "/tmp/r/replay"
