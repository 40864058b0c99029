"""The generated protobuf code (``worker.formats.bookkeeper_data_formats_pb2`` and ``bookkeeper_protocol_pb2``, with
their .pyi stubs) is what the .proto files in worker/formats/proto give: regenerate with ``make protos``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FORMATS = Path(__file__).resolve().parents[2] / "worker" / "formats"


@pytest.mark.skipif(shutil.which("protoc-gen-mypy", path=str(Path(sys.executable).parent)) is None, reason="make venv")
def test_the_generated_protobuf_code_is_current(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    protos = sorted(p.name for p in (FORMATS / "proto").glob("*.proto"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I.",
            f"--python_out={tmp_path}",
            f"--mypy_out={tmp_path}",
            *protos,
        ],
        cwd=FORMATS / "proto",
        check=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    )
    for made in sorted(tmp_path.iterdir()):
        assert made.read_bytes() == (FORMATS / made.name).read_bytes(), f"{made.name} is stale: make protos"
