"""`make system-packages` installs whenever any of the system commands is missing, and fails when they are still
missing after the install; `.ci/run` stops there. Run with PATH narrowed to a directory of our own: the commands
present are stand-in scripts, `apt-get` records how it was called (and installs or not, as the case says)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAKE = "/usr/bin/make"


def system_commands() -> list[str]:
    m = re.search(r"^SYSTEM_COMMANDS := (.+)$", (REPO / "Makefile").read_text(), re.M)
    assert m, "SYSTEM_COMMANDS is not in the Makefile"
    return m.group(1).split()


COMMANDS = system_commands()


def script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def machine(
    tmp_path: Path, present: list[str], apt_installs: bool, apt_fails: bool = False, update_fails: bool = False
) -> Path:
    """A PATH directory holding ``present`` and an ``apt-get`` that logs its arguments and, if ``apt_installs``,
    makes every system command appear (as `apt-get install` of the packages would)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for c in present:
        script(bindir / c, "exit 0")
    install = "".join(f"printf '#!/bin/sh\\n' > {bindir}/{c}; /bin/chmod 755 {bindir}/{c}; " for c in COMMANDS)
    script(
        bindir / "apt-get",
        f'echo "$*" >> {tmp_path}/apt.log\n'
        + (
            "exit 100"
            if apt_fails
            else f'case "$1" in install) {install if apt_installs else ":"};;'
            + (" update) exit 100;;" if update_fails else "")
            + " esac"
        ),
    )
    return bindir


def make(target: str, bindir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MAKE, "--no-print-directory", "-C", str(REPO), target],
        env={"PATH": str(bindir), "HOME": os.environ.get("HOME", "/root")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def apt_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


MISSING_CASES = [[c] for c in COMMANDS] + [COMMANDS[:2], COMMANDS]


@pytest.mark.parametrize("missing", MISSING_CASES, ids=["+".join(m) for m in MISSING_CASES])
def test_any_missing_command_installs_the_packages(tmp_path: Path, missing: list[str]) -> None:
    bindir = machine(tmp_path, [c for c in COMMANDS if c not in missing], apt_installs=True)
    r = make("system-packages", bindir)
    assert r.returncode == 0, r.stderr
    calls = apt_calls(tmp_path)
    assert calls and calls[0].startswith("update"), calls
    assert any(c.startswith("install") and "prometheus-pushgateway" in c for c in calls), calls
    assert all((bindir / c).exists() for c in COMMANDS)


@pytest.mark.parametrize("missing", MISSING_CASES, ids=["+".join(m) for m in MISSING_CASES])
def test_a_command_still_missing_after_the_install_fails_the_target(tmp_path: Path, missing: list[str]) -> None:
    bindir = machine(tmp_path, [c for c in COMMANDS if c not in missing], apt_installs=False)
    r = make("system-packages", bindir)
    assert r.returncode != 0
    assert f"still missing after the install: {' '.join(missing)}" in r.stderr
    assert apt_calls(tmp_path), "apt-get was never called"


def test_a_failing_apt_get_fails_the_target(tmp_path: Path) -> None:
    bindir = machine(tmp_path, COMMANDS[1:], apt_installs=False, apt_fails=True)
    r = make("system-packages", bindir)
    assert r.returncode != 0 and "apt-get failed" in r.stderr


def test_a_failing_apt_get_update_does_not_stop_the_install(tmp_path: Path) -> None:
    # A fresh machine: no package lists yet, or a mirror down for the update. The install still runs and decides.
    bindir = machine(tmp_path, [], apt_installs=True, update_fails=True)
    r = make("system-packages", bindir)
    assert r.returncode == 0, r.stderr
    assert "apt-get update failed" in r.stderr
    assert [c.split()[0] for c in apt_calls(tmp_path)] == ["update", "install"]


def test_every_command_there_asks_apt_get_only_for_an_install_that_upgrades_nothing(tmp_path: Path) -> None:
    """As root apt-get is asked even when the check finds everything: a PATH can reach commands a fresh machine's
    packages do not hold. The lists are not updated, and nothing installed is upgraded."""
    bindir = machine(tmp_path, COMMANDS, apt_installs=False)
    r = make("system-packages", bindir)
    assert r.returncode == 0, r.stderr
    if os.geteuid() == 0:
        assert apt_calls(tmp_path) == [
            "install -y -qq --no-install-recommends --no-upgrade prometheus prometheus-pushgateway openssl tmux"
        ]
    else:
        assert apt_calls(tmp_path) == []


def test_a_failing_install_of_what_is_there_does_not_fail_the_target(tmp_path: Path) -> None:
    bindir = machine(tmp_path, COMMANDS, apt_installs=False, apt_fails=True)
    r = make("system-packages", bindir)
    assert r.returncode == 0, r.stderr
    if os.geteuid() == 0:
        assert "apt-get failed (install of what was found there)" in r.stderr


@pytest.mark.parametrize("missing", MISSING_CASES, ids=["+".join(m) for m in MISSING_CASES])
def test_make_test_names_what_is_missing(tmp_path: Path, missing: list[str]) -> None:
    bindir = machine(tmp_path, [c for c in COMMANDS if c not in missing], apt_installs=False)
    r = make("system-packages-present", bindir)
    assert r.returncode != 0
    assert f"missing: {' '.join(missing)} (run `make system-packages`" in r.stderr


def test_ci_stops_when_the_system_packages_cannot_be_installed(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink("/usr/bin/dirname", bindir / "dirname")
    script(bindir / "make", f'echo "$*" >> {tmp_path}/make.log\n[ "$1" = system-packages ] && exit 2\nexit 0')
    r = subprocess.run(
        ["/bin/bash", str(REPO / ".ci" / "run")],
        env={"PATH": str(bindir), "CI": "true"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    assert "make system-packages failed" in r.stdout
    calls = (tmp_path / "make.log").read_text().splitlines()
    assert calls == ["system-packages"], calls


def test_packages_the_package_database_lacks_are_installed_even_when_path_finds_their_commands(
    tmp_path: Path,
) -> None:
    """Every command on PATH (reached without its package: merged /usr, a copy), but Debian's database holds none of
    the packages: the install runs; the check after it asks the database again."""
    bindir = machine(tmp_path, COMMANDS, apt_installs=True)
    script(bindir / "dpkg-query", f'[ -f {tmp_path}/installed ] && printf "ii "; exit 0')
    installs = f": > {tmp_path}/installed"
    script(bindir / "apt-get", f'echo "$*" >> {tmp_path}/apt.log; case "$1" in install) {installs};; esac')
    r = make("system-packages", bindir)
    assert r.returncode == 0, r.stderr
    calls = apt_calls(tmp_path)
    assert [c.split()[0] for c in calls] == ["update", "install"], calls
    assert calls[1].split()[-4:] == ["prometheus", "prometheus-pushgateway", "openssl", "tmux"], calls
