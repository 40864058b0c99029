"""A minimal Dockerfile reader: enough for the tests to check stages and replay install steps."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arg for k, arg in self.instructions if k == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None


def parse(path: Path) -> list[Stage]:
    lines: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        if raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = (pending + raw).strip()
        pending = ""
        if line:
            lines.append(line)
    stages: list[Stage] = []
    for line in lines:
        keyword, _, arg = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = arg.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, parts[0]))
        elif stages:
            stages[-1].instructions.append((keyword, " ".join(arg.split())))
    return stages


def exec_form(arg: str) -> list[str] | None:
    """The JSON array of an exec-form ENTRYPOINT/CMD, or None for shell form."""
    try:
        value = json.loads(arg)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None
