"""Which of an idle topic's ledgers are past its retention: the broker's own trim rule
(``ManagedLedgerImpl.internalTrimLedgers``, Pulsar 4.0), run on the records the metadata store keeps for a
topic no broker has loaded (PIP-219: nobody trims it). ``trim-idle`` finds them with this rule.

The rule, read behaviour by behaviour (effective retention, only below the slowest cursor, oldest first
stopping at the first kept one, ``-1`` infinite and ``0`` nothing, never the current ledger) and why this
answer is a lower bound of what the broker trims on a load: docs/cli.md, "``trim-idle``: reclaim what
nothing trims". A cursor whose znode records no mark-delete position keeps every ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from worker.core.policy_hierarchy import applied
from worker.formats.managed_ledger_metadata import LedgerInfo, ManagedCursorInfo, ManagedLedgerInfo

MEGABYTE = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Retention:
    """Pulsar's ``RetentionPolicies``: minutes and megabytes, ``-1`` infinite, ``0`` none."""

    minutes: int
    size_mb: int

    def __str__(self) -> str:
        time = "infinite" if self.minutes < 0 else f"{self.minutes}m"
        size = "infinite" if self.size_mb < 0 else f"{self.size_mb} MB"
        return f"{time}, {size}"

    def to_dict(self) -> dict[str, int]:
        return {"retentionTimeInMinutes": self.minutes, "retentionSizeInMB": self.size_mb}

    @classmethod
    def from_policy(cls, policy: object) -> Retention | None:
        """A ``RetentionPolicies`` as the admin API or the metadata store writes it (None: unset or not one)."""
        if not isinstance(policy, Mapping):
            return None
        minutes, size = policy.get("retentionTimeInMinutes"), policy.get("retentionSizeInMB")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (minutes, size)):
            return None
        assert isinstance(minutes, int) and isinstance(size, int)
        return cls(minutes, size)


@dataclass(frozen=True, slots=True)
class EffectiveRetention:
    retention: Retention
    source: str  # "topic", "namespace" or "broker"


def effective_retention(
    topic: Retention | None, namespace: Retention | None, broker_default: Retention
) -> EffectiveRetention:
    """The retention the broker applies to a topic: its own, else its namespace's, else the broker default."""
    return EffectiveRetention(*applied(topic, namespace, broker_default))


@dataclass(frozen=True, slots=True)
class PastRetention:
    """The ledgers a trim of the loaded topic would drop (oldest first), and why the rest stay."""

    ledgers: tuple[LedgerInfo, ...]
    kept_because: str
    # The cursor whose mark-delete position keeps some closed ledger (None: no cursor keeps one).
    slowest_cursor: str | None = None

    @property
    def ledger_ids(self) -> tuple[int, ...]:
        return tuple(ld.ledger_id for ld in self.ledgers)

    @property
    def size(self) -> int:
        return sum(ld.size or 0 for ld in self.ledgers)


def _slowest(cursors: Mapping[str, ManagedCursorInfo]) -> tuple[str, int, int] | str | None:
    """The slowest cursor and its mark-delete position; None with no cursor; a reason when a cursor's
    position is not recorded."""
    slowest: tuple[str, int, int] | None = None
    for name in sorted(cursors):
        c = cursors[name]
        if c.mark_delete_ledger_id is None or c.mark_delete_entry_id is None:
            return f"cursor {name} has no mark-delete position in its znode"
        pos = (c.mark_delete_ledger_id, c.mark_delete_entry_id)
        if slowest is None or pos < slowest[1:]:
            slowest = (name, *pos)
    return slowest


def past_retention(
    managed_ledger: ManagedLedgerInfo,
    cursors: Mapping[str, ManagedCursorInfo],
    retention: Retention,
    now_ms: int,
) -> PastRetention:
    """The ledgers of a topic nobody has loaded that its broker drops when it trims the topic (a lower
    bound: see the module's notes)."""
    ledgers = sorted(managed_ledger.ledgers, key=lambda ld: ld.ledger_id)
    if len(ledgers) < 2:
        return PastRetention((), "no closed ledger before the last one")
    closed = ledgers[:-1]  # the last one is recovered and stamped afresh when the topic loads
    slowest = _slowest(cursors)
    if isinstance(slowest, str):
        return PastRetention((), slowest)
    cursor_name: str | None = None
    cursor_reason = ""
    if slowest is not None:
        name, md_ledger, md_entry = slowest
        md = next((ld for ld in closed if ld.ledger_id == md_ledger), None)
        # A mark-delete on a ledger's last entry has consumed the whole ledger: it may go too.
        bound = md_ledger + 1 if md is not None and (md.entries or 0) == md_entry + 1 else md_ledger
        needed = [ld for ld in closed if ld.ledger_id >= bound]
        if needed:
            cursor_name = name
            cursor_reason = f"cursor {name} has not acknowledged all of ledger {needed[0].ledger_id}"
            closed = [ld for ld in closed if ld.ledger_id < bound]
    total = sum(ld.size or 0 for ld in ledgers)
    to_delete = 0
    out: list[LedgerInfo] = []
    for ld in closed:
        to_delete += ld.size or 0
        over_quota = retention.size_mb >= 0 and total - to_delete >= retention.size_mb * MEGABYTE
        expired = (
            retention.minutes >= 0
            # An unset timestamp reads as 0 in the broker (protobuf's default): expired.
            and now_ms - (ld.timestamp or 0) > retention.minutes * 60_000
        )
        if not (expired or over_quota):
            return PastRetention(tuple(out), f"ledger {ld.ledger_id} is within retention ({retention})", cursor_name)
        out.append(ld)
    if cursor_reason:
        return PastRetention(tuple(out), cursor_reason, cursor_name)
    return PastRetention(tuple(out), "only the last ledger is left", cursor_name)
