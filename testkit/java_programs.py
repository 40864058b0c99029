"""The Java programs of ``tests/integration/java`` (BookKeeper's and Pulsar's own clients at work: real ledgers,
BookKeeper's recovery, a scalable topic's producer), run on the jars and the Java of the Pulsar the stack runs.

They are compiled once per Pulsar line and source (under the stack's cache, beside that line's jars) and then
run from their classes: launching a source file (``java Program.java``) compiles it again in every JVM, which
is most of what such a launch costs, and the tests make about a hundred of them.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from testkit.stack import REPO, pulsar_home, pulsar_java

SOURCES = REPO / "tests" / "integration" / "java"


def java_command(program: str, *args: str) -> list[str]:
    """The command line that runs ``program`` (a class of ``tests/integration/java``) with ``args``."""
    home = pulsar_home()
    java = pulsar_java(home)
    return [java, "-cp", f"{compiled(home, java, program)}:{home}/lib/*", program, *args]


def _javac(java: str) -> str:
    """The compiler of the JDK ``java`` belongs to (``java`` on the PATH: the PATH's)."""
    javac = shutil.which("javac") if java == "java" else str(Path(java).with_name("javac"))
    if not javac or not Path(javac).exists():
        raise AssertionError(f"no javac beside {java}: the Java programs of {SOURCES} need a JDK")
    return javac


@functools.cache
def compiled(home: Path, java: str, program: str) -> Path:
    """The classes of ``program`` (``SOURCES/<program>.java``), compiled against ``home``'s jars by ``java``'s
    JDK; made once per source, Pulsar and JDK, and shared by every process (a finished directory is never
    rewritten). One program at a time: each needs only its own line's API (ProduceScalable: Pulsar 5's)."""
    source = SOURCES / f"{program}.java"
    digest = hashlib.sha256(f"{home}\0{java}\0{source.read_text()}".encode()).hexdigest()[:16]
    out = home.parent / "java-programs" / f"{program}-{digest}"
    if out.is_dir():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
    try:
        r = subprocess.run(
            [_javac(java), "-nowarn", "-cp", f"{home}/lib/*", "-d", str(tmp), str(source)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if r.returncode != 0:
            raise AssertionError(f"javac failed on {source}:\n{r.stderr[-3000:]}")
        try:
            tmp.rename(out)
        except OSError:
            if not out.is_dir():  # not another process's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
