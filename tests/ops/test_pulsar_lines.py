"""The supported Pulsar lines live in one file, deploy/local/pulsar-lines.txt, and the local stack's builds live
apart from its processes: stack.sh starts what `make pulsar-dist`, `make offloader` and `make broker-extension-jar`
made (deploy/local/build.sh), and builds nothing itself.

What cannot read the file (Maven's poms, the docs) is checked against it here; what reads it (the Makefile, stack.sh,
testkit) is checked to follow it. No process is started: `up` on an empty STACK_CACHE refuses before starting any."""

from __future__ import annotations

import re
import socket
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from testkit.stack import PROFILES, REPO, Profile, PulsarLine, line_of, pulsar_line, pulsar_lines

LOCAL = REPO / "deploy" / "local"
BUILD = LOCAL / "build.sh"
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
ROWS = pulsar_lines()
DEFAULT = pulsar_line("default")
STACK_LINES = [r for r in ROWS if r.dist]  # the lines a stack runs on (4.2's only has the extension's JUnit run)


def test_the_table_has_one_default_line_and_every_placement_is_a_profiles_directory() -> None:
    assert [r.use for r in ROWS].count("default") == 1
    assert len({r.line for r in ROWS}) == len(ROWS) and len({r.version for r in ROWS}) == len(ROWS)
    for r in ROWS:
        assert r.version.startswith(r.line + "."), r
        assert r.use in ("default", "stack", "junit") and r.dist in (None, "tarball", "jars"), r
        assert (r.use == "junit") == (r.dist is None), r
    placements = {r.placement for r in ROWS if r.placement}
    assert {p.name for p in PROFILES.iterdir() if p.is_dir()} == placements
    for p in placements:  # a placement moves profiles that exist
        assert {f.stem for f in (PROFILES / p).glob("*.env")} <= {f.stem for f in PROFILES.glob("*.env")}
    # The version lives in the table, not in the profiles' defaults.
    assert not re.search(r"^PULSAR_VERSION=", (PROFILES / "defaults.env").read_text(), re.M)


def test_line_of_matches_by_version_then_by_major_minor() -> None:
    assert line_of(DEFAULT.version) == DEFAULT
    five = pulsar_line("5.0")
    assert line_of("5.0.99") == five and line_of("9.9.9") is None


# --- what cannot read the table: checked against it ------------------------------------------------------------


def pom_properties(pom: Path, profile: str | None = None) -> dict[str, str]:
    """A pom's <properties>, with a profile's over them."""
    root = ET.parse(pom).getroot()

    def props(node: ET.Element | None) -> dict[str, str]:
        if node is None:
            return {}
        return {el.tag.split("}", 1)[1]: (el.text or "").strip() for el in node}

    found = props(root.find("m:properties", POM_NS))
    if profile is not None:
        ids = {p.findtext("m:id", namespaces=POM_NS): p for p in root.iterfind("m:profiles/m:profile", POM_NS)}
        assert profile in ids, f"{pom} has no profile {profile} (it has {sorted(k for k in ids if k)})"
        found |= props(ids[profile].find("m:properties", POM_NS))
    return found


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.line)
def test_the_extension_pom_builds_and_tests_on_each_line_as_the_table_says(row: PulsarLine) -> None:
    """The default line is the pom's own properties (what the jar is compiled against); every other line is the
    profile pulsar-<line> that `make broker-extension` runs the JUnit tests with."""
    pom = REPO / "broker-extension" / "pom.xml"
    props = pom_properties(pom, None if row == DEFAULT else f"pulsar-{row.line}")
    assert (props["pulsar.version"], props["bookkeeper.version"]) == (row.version, row.bookkeeper)
    assert int(props["maven.compiler.release"]) <= row.java
    makefile = (REPO / "Makefile").read_text()
    if row != DEFAULT:
        assert f"-Ppulsar-{row.line} " in makefile, f"make broker-extension runs no -Ppulsar-{row.line}"


def test_the_build_poms_default_to_the_lines_they_build() -> None:
    """deploy/local/assembly/pom.xml is run for the jars lines, deploy/local/offloaders/pom.xml for the offloaders;
    build.sh passes the versions, and the poms' own defaults (what a reader runs by hand) are the table's."""
    jars = [r for r in STACK_LINES if r.dist == "jars"]
    assembly = pom_properties(LOCAL / "assembly" / "pom.xml")
    assert (assembly["pulsar.version"], assembly["bookkeeper.version"]) in {(r.version, r.bookkeeper) for r in jars}
    offloaders = pom_properties(LOCAL / "offloaders" / "pom.xml")
    assert offloaders["pulsar.version"] == DEFAULT.offloader
    assert {r.offloader for r in STACK_LINES} == {DEFAULT.offloader}, "a new offloader line: say which the pom names"


def doc_section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start : end if end >= 0 else None]


def first_cells(section: str) -> list[str]:
    return [ln.split("|")[1].strip() for ln in section.splitlines() if ln.startswith("| ") and ln.count("|") > 2]


def test_the_docs_version_tables_name_every_line() -> None:
    supported = first_cells(doc_section(REPO / "docs" / "development.md", "## Supported Pulsar versions"))
    for r in ROWS:
        assert any(c.startswith(r.line) and f"({r.version})" in c for c in supported), (r, supported)
    extension = first_cells(doc_section(REPO / "docs" / "broker-extension.md", "## Which Pulsar"))
    for r in ROWS:
        assert any(c == r.version or f"({r.version})" in c for c in extension), (r, extension)
    # The ports table of the 5.0 section: a column per stack line, headed by its version (the default's) or x.
    ports = doc_section(REPO / "docs" / "development.md", "### Pulsar 5.0")
    header = next(ln for ln in ports.splitlines() if ln.startswith("| component |"))
    assert header == f"| component | {DEFAULT.version} | 5.x |"


VERSION_ASSIGNMENT = re.compile(r"\bPULSAR(?:5)?_VERSION\s*[:?]?=\s*([0-9][\w.-]*)")


@pytest.mark.parametrize(
    "path",
    ["README.md", "docs/development.md", "docs/broker-extension.md", "deploy/local/OFFLOAD.md", "Makefile", ".ci/run"],
)
def test_every_pulsar_version_a_command_names_is_a_line_of_the_table(path: str) -> None:
    """`PULSAR_VERSION=<v>` in a command of the docs names a row's version (3.3.6 is the docs' one failed try)."""
    versions = {r.version for r in ROWS} | {"3.3.6"}
    named = VERSION_ASSIGNMENT.findall((REPO / path).read_text())
    assert set(named) <= versions, (path, set(named) - versions)


@pytest.mark.parametrize("path", ["Makefile", ".ci/run", "deploy/local/stack.sh", "deploy/local/build.sh"])
def test_the_readers_hardcode_no_version(path: str) -> None:
    code = [ln for ln in (REPO / path).read_text().splitlines() if not ln.lstrip().startswith("#")]
    for r in ROWS:
        assert not [ln for ln in code if r.version in ln], (path, r.version)


# --- what reads the table: follows it ------------------------------------------------------------------------------


def make_dry_run(*args: str) -> str:
    """``make -n`` (nothing runs: the targets used here have no recursive recipe that starts anything)."""
    r = subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_make_starts_and_builds_each_line_from_the_table() -> None:
    up = make_dry_run("stack-up")
    assert f"PULSAR_VERSION={DEFAULT.version} bash deploy/local/build.sh pulsar-dist" in up
    assert f"PULSAR_VERSION={DEFAULT.version} bash deploy/local/build.sh offloader" in up
    assert f"PULSAR_VERSION={DEFAULT.version} PROFILE=standalone bash deploy/local/stack.sh up" in up
    # The builds come first: a stack is never started before what it runs is made.
    assert up.index("build.sh offloader") < up.index("stack.sh up")
    five = pulsar_line("5.0")
    p5 = make_dry_run("test-pulsar5")
    assert f"PULSAR_VERSION={five.version} bash deploy/local/build.sh pulsar-dist" in p5
    assert p5.index("build.sh pulsar-dist") < p5.index("stack.sh up")
    assert f"PULSAR_VERSION={five.version} PROFILE=standalone bash deploy/local/stack.sh up" in p5
    assert f"PULSAR_VERSION={five.version} PROFILE=standalone bash deploy/local/stack.sh down" in make_dry_run(
        "stack-down-pulsar5"
    )


@pytest.mark.parametrize("row", STACK_LINES, ids=lambda r: r.line)
def test_stack_sh_and_build_sh_agree_on_where_a_lines_build_lives(row: PulsarLine, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    placement = {"PULSAR_VERSION": row.version, "STACK_DIR": str(tmp_path / "d"), "STACK_CACHE": str(cache)}
    instance = Profile("standalone", placement, prefix="LDW_TEST_")
    addresses = instance.addresses()
    built = subprocess.run(
        ["bash", str(BUILD), "path"],
        env=instance.environ(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert built.returncode == 0, built.stderr
    assert addresses["PULSAR_HOME"] == built.stdout.strip() == str(cache / f"apache-pulsar-{row.version}")


# --- stack.sh builds nothing ---------------------------------------------------------------------------------------

BUILD_COMMANDS = re.compile(r"(?<![\w.-])(mvn|unzip|zip|tar|wget|curl -[a-zA-Z]*O|build\.sh|dependency:\w+)(?![\w.-])")


@pytest.mark.parametrize("script", ["stack.sh", "lines.sh"])
def test_stack_sh_invokes_no_build_tool(script: str) -> None:
    code = [ln.split(" #", 1)[0] for ln in (LOCAL / script).read_text().splitlines() if not ln.lstrip().startswith("#")]
    found = [ln for ln in code if BUILD_COMMANDS.search(ln)]
    assert not found, found


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize(("profile", "row"), [("standalone", DEFAULT), ("cluster", DEFAULT), ("standalone", None)])
def test_up_on_an_empty_cache_refuses_naming_the_make_targets_and_starts_nothing(
    tmp_path: Path, profile: str, row: PulsarLine | None
) -> None:
    line = row or pulsar_line("5.0")
    keys = ["WEB_PORT", "WEB_PORT_2", "BROKER_PORT", "BROKER_PORT_2", "BOOKIE_PORT", "BOOKIE_PORT_2"]
    keys += ["BOOKIE_HTTP_PORT", "BOOKIE_HTTP_PORT_2", "ZK_PORT", "S3_PORT"]
    placement = dict(zip(keys, map(str, free_ports(len(keys))), strict=True))
    placement |= {"PULSAR_VERSION": line.version, "STACK_DIR": str(tmp_path / "data")}
    placement |= {"STACK_CACHE": str(tmp_path / "cache"), "STACK_START_TIMEOUT": "5"}
    instance = Profile(profile, placement, prefix="LDW_TEST_")
    r = instance.run("up", timeout=120)
    assert r.returncode == 1, (r.stdout, r.stderr[-3000:])
    assert f"make pulsar-dist PULSAR_VERSION={line.version}" in r.stderr
    assert f"make offloader PULSAR_VERSION={line.version}" in r.stderr
    assert f"make stack-builds PULSAR_VERSION={line.version}" in r.stderr
    assert "nothing was started" in r.stderr
    run = tmp_path / "data" / "run"
    assert not list(run.glob("*.pid")), list(run.iterdir())
    assert not [p for k, p in placement.items() if k.endswith("_PORT") and listening(int(p))]
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
