"""Whether a bookie HTTP endpoint belongs to the BookKeeper cluster whose metadata store the worker reads:
a bookie of another cluster would delete that cluster's ledgers of the same ids (docs/design.md, "The
message never chooses where the worker connects"), so every endpoint must be registered in our store
(``<ledgers_root>/available``, ``available/readonly``) before it serves a call.

Which bookie an endpoint is (BookKeeper 4.17, ``BookieImpl.getBookieId``): ``bookieId`` when set, else
``advertisedAddress:bookiePort`` (port 3181 by default), from ``GET /api/v1/config/server_config``; when the
id cannot be derived (from the host's interface), the bookie's own ``list_bookies`` (``rw`` and ``ro``) must
share a bookie with ours. Not distinguished: two clusters that register the same bookie ids.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

DEFAULT_BOOKIE_PORT = 3181


def bookie_id_from_config(conf: Mapping[str, object]) -> str | None:
    """The bookie's id from its ``server_config`` answer, or None when it is derived from the bookie
    host's interface (not knowable from outside)."""
    custom = str(conf.get("bookieId") or "").strip()
    if custom:
        return custom
    advertised = str(conf.get("advertisedAddress") or "").strip()
    if not advertised:
        return None
    port = str(conf.get("bookiePort") or "").strip() or str(DEFAULT_BOOKIE_PORT)
    return f"{advertised}:{port}"


def why_not_ours(own_id: str | None, its_cluster: Collection[str] | None, registered: Collection[str]) -> str | None:
    """None when the bookie belongs to our cluster, else why not. ``own_id``: its id (when derivable);
    ``its_cluster``: the bookie ids its own cluster lists (used only without ``own_id``); ``registered``:
    the ids our metadata store lists."""
    ours = sorted(registered)
    if own_id is not None:
        if own_id in registered:
            return None
        return f"its bookie id {own_id!r} is not registered in our metadata store (registered: {ours})"
    if its_cluster is None:
        return "its bookie id cannot be told (no bookieId nor advertisedAddress) and it lists no cluster"
    if set(its_cluster) & set(registered):
        return None
    return f"its cluster's bookies {sorted(its_cluster)} are none of those our metadata store registers ({ours})"
