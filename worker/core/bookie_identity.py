"""Whether a bookie HTTP endpoint belongs to the BookKeeper cluster whose metadata store the worker reads.

Any bookie deletes any ledger *of its own cluster*, through its own metadata store: a URL that reaches a
bookie of another cluster would read and delete that cluster's ledgers of the same ids. So every
configured endpoint is checked against the bookies registered in our store (``<ledgers_root>/available``
and ``<ledgers_root>/available/readonly``) before it serves a call.

Which bookie an endpoint is (BookKeeper 4.17, ``BookieImpl.getBookieId``): ``bookieId`` when set, else
``advertisedAddress:bookiePort`` when an advertised address is set (``bookiePort`` defaults to 3181),
else an address derived from the bookie host's network interface (or its canonical host name with
``useHostNameAsBookieID``), which cannot be known from outside. ``GET /api/v1/config/server_config``
answers the bookie's configuration as a JSON object of strings (only the keys that are set). When the id
cannot be derived, the bookie's own view of its cluster (``GET /api/v1/bookie/list_bookies?type=rw`` and
``?type=ro``: a JSON object keyed by bookie id) must share a bookie with ours.

Not distinguished: two clusters that register the same bookie ids (two Pulsar standalones both register
``bk0test``); the bookie HTTP API exposes nothing that names its metadata store in a comparable form.
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
