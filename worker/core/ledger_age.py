"""The minimum age: a ledger (or an offloaded copy of one) younger than it is never deleted nor reported, since
a ledger is created before its id is recorded anywhere (docs/design.md, "Open and young ledgers stay"). One
rule for the worker, the scanner and the nightly audit's offloaded objects. No creation time is never old
enough; a creation time after "now" (another machine's clock) is not old enough either, even with a minimum
of zero: the age is clamped to 0 for display only, never for the decision.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LedgerAge:
    age_ms: float | None  # None: no creation time; never negative
    old_enough: bool

    @property
    def known(self) -> bool:
        return self.age_ms is not None


def ledger_age(created_ms: float | None, *, now_ms: float, min_age_ms: float) -> LedgerAge:
    """How old a ledger created at ``created_ms`` is at ``now_ms``, and whether it may be deleted."""
    if created_ms is None:
        return LedgerAge(None, False)
    elapsed = now_ms - created_ms
    return LedgerAge(max(0.0, float(elapsed)), elapsed >= min_age_ms)
