"""Queries of the dashboard and the alert rules, as the integration test and the unit tests read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# What Grafana substitutes before sending a query; the value is a window every test scrape interval fills.
GRAFANA_VARS = {"$__rate_interval": "1m"}


def dashboard_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, Grafana variables substituted."""
    out = []
    for p in board["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"]
            for k, v in GRAFANA_VARS.items():
                expr = expr.replace(k, v)
            out.append((p["title"], expr))
    return out


def alert_rules(path: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
