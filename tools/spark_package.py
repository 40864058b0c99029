"""What a Spark cluster needs to run the nightly jobs without the project installed on its nodes
(``make spark-package``):

- ``dist/ledger_deletion_worker.zip``: the ``worker`` package (its sources only), for ``spark-submit
  --py-files``: Spark puts it on the driver's and every executor's Python path;
- ``dist/node-requirements.txt``: the third-party packages each node's Python must have (the project's
  dependencies and the ``spark`` extra's pandas and pyarrow; PySpark itself comes with Spark on the nodes),
  for ``pip install -r`` there.

The entry point is ``deploy/spark/ldw_submit.py``.
"""

from __future__ import annotations

import argparse
import re
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ZIP_NAME = "ledger_deletion_worker.zip"
REQUIREMENTS_NAME = "node-requirements.txt"
# The spark extra's packages the nodes need beside Spark's own PySpark.
NODE_EXTRAS = ("pandas", "pyarrow")


def build_zip(out: Path) -> int:
    """The worker package's files (no bytecode caches), at the zip's root as ``worker/...``. Returns the
    number of files written; entries get a fixed timestamp so that the same sources give the same zip."""
    files = sorted(
        p
        for p in (REPO / "worker").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".typed", ".json", ".avsc")
    )
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for p in files:
            info = zipfile.ZipInfo(str(p.relative_to(REPO)), date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, p.read_bytes())
    tmp.replace(out)
    return len(files)


def node_requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    spark = [
        r for r in project["optional-dependencies"]["spark"] if re.split(r"[<>=!\[ ]", r, maxsplit=1)[0] in NODE_EXTRAS
    ]
    return [*project["dependencies"], *spark]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dist", default=str(REPO / "dist"))
    args = ap.parse_args()
    dist = Path(args.dist)
    dist.mkdir(parents=True, exist_ok=True)
    n = build_zip(dist / ZIP_NAME)
    (dist / REQUIREMENTS_NAME).write_text("\n".join(node_requirements()) + "\n")
    print(f"{dist / ZIP_NAME}: {n} files; {dist / REQUIREMENTS_NAME}; entry point deploy/spark/ldw_submit.py")


if __name__ == "__main__":
    main()
