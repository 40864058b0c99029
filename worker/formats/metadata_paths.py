"""Where Pulsar and BookKeeper keep things in their metadata stores: a topic's managed-ledger znode and a
ledger's metadata znode under each supported ledger layout (checked on Pulsar 4.0 and in the sources):

- ``/ledgers/LAYOUT`` names the ledger manager; Pulsar's own PulsarLedgerManager (the one its brokers and
  bookies use) and BookKeeper's HierarchicalLedgerManager put ledger ``id < Integer.MAX_VALUE`` at
  ``/ledgers/00/0000/L0042`` (``%010d`` split 2-4-4) and larger ids at
  ``/ledgers/000/0000/0000/0000/L0042`` (``%019d`` split 3-4-4-4-4). LongHierarchicalLedgerManager uses
  the long form for every id. Any other layout is refused rather than guessed.
"""

from __future__ import annotations

from collections.abc import Callable

from worker.formats.topic_name import TopicName

MANAGED_LEDGERS_ROOT = "/managed-ledgers"


_INT_MAX = 2**31 - 1


_LONG_MAX = 2**63 - 1


class UnsupportedLedgerLayout(Exception):
    """``/ledgers/LAYOUT`` names a ledger manager whose paths this module does not know."""


def managed_ledger_path(topic: TopicName) -> str:
    """The topic's managed-ledger znode (``TopicName.getPersistenceNamingEncoding`` under the root)."""
    return f"{MANAGED_LEDGERS_ROOT}/{topic.managed_ledger_name}"


def _short_path(ledger_id: int) -> str:
    s = f"{ledger_id:010d}"
    return f"/{s[0:2]}/{s[2:6]}/L{s[6:10]}"


def _long_path(ledger_id: int) -> str:
    s = f"{ledger_id:019d}"
    return f"/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def hierarchical_ledger_path(ledger_id: int, root: str = "/ledgers") -> str:
    """BookKeeper's ``StringUtils.getHybridHierarchicalLedgerPath`` under ``root``."""
    _check_id(ledger_id)
    # Strictly below Integer.MAX_VALUE, as in BookKeeper: MAX_VALUE itself takes the long form.
    return root + (_short_path(ledger_id) if ledger_id < _INT_MAX else _long_path(ledger_id))


def long_hierarchical_ledger_path(ledger_id: int, root: str = "/ledgers") -> str:
    _check_id(ledger_id)
    return root + _long_path(ledger_id)


def _check_id(ledger_id: int) -> None:
    if not isinstance(ledger_id, int) or not 0 <= ledger_id <= _LONG_MAX:
        raise ValueError(f"not a ledger id: {ledger_id!r}")


_LAYOUTS: dict[str, Callable[[int, str], str]] = {
    "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory": hierarchical_ledger_path,
    "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory": long_hierarchical_ledger_path,
    # Pulsar's own factory (metadata-store driver) builds a PulsarLedgerManager: the same hybrid paths.
    "org.apache.pulsar.metadata.bookkeeper.PulsarLedgerManagerFactory": hierarchical_ledger_path,
}


def parse_layout(data: bytes) -> Callable[[int, str], str]:
    """``/ledgers/LAYOUT`` is ``<layout format version>\\n<factory class>:<factory version>``."""
    try:
        lines = data.decode("utf-8").strip().splitlines()
        factory = lines[1].rsplit(":", 1)[0].strip()
    except (UnicodeDecodeError, IndexError) as e:
        raise UnsupportedLedgerLayout(f"unreadable ledger layout {data!r}") from e
    path_fn = _LAYOUTS.get(factory)
    if path_fn is None:
        raise UnsupportedLedgerLayout(f"ledger manager {factory!r} is not supported (known: {sorted(_LAYOUTS)})")
    return path_fn
