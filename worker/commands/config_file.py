"""Which settings file a command uses: ``--config FILE``, else ``$LDW_CONFIG``, else built-in defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CONFIG_ENV = "LDW_CONFIG"


def config_help(env: Mapping[str, str] | None = None) -> str:
    """The ``--config`` help, naming the file a run would use now."""
    env = os.environ if env is None else env
    chosen = env.get(CONFIG_ENV)
    now = f"now {chosen}" if chosen else "unset, so built-in defaults are used"
    return (
        f"YAML settings file; without it ${CONFIG_ENV} ({now}); with neither, built-in defaults."
        " LDW_<SECTION>__<KEY> variables override any of them"
    )


def resolve_config(arg: str | None, env: Mapping[str, str] | None = None) -> tuple[Path | None, str]:
    """The settings file to load (absolute) and where that choice came from, for messages."""
    env = os.environ if env is None else env
    if arg is not None:
        return Path(arg).expanduser().absolute(), "--config"
    chosen = env.get(CONFIG_ENV)
    if chosen:
        return Path(chosen).expanduser().absolute(), f"${CONFIG_ENV}"
    return None, "built-in defaults"
