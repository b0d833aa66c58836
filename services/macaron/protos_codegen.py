"""Generates the Python code of `protos/` (messages, type stubs, gRPC stubs) into `services/macaron/v1/`.

`scripts/generate` writes what this returns and `tests/test_generated.py` fails when the
committed files differ, so the generated code is never edited by hand. protoc runs into a
temporary directory and the result is returned, not written, which keeps it deterministic
(sorted inputs, no timestamps) and lets the staleness check compare bytes.
"""

from __future__ import annotations

import tempfile
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO_ROOT / "protos"
PACKAGE_DIR = "macaron/v1"
OUTPUT_DIR = "services/macaron/v1"
INIT_TEXT = b'"""Generated from protos/macaron/v1 by `scripts/generate`; do not edit."""\n'


def proto_files() -> list[Path]:
    """The contract's .proto files, sorted."""
    return sorted((PROTO_ROOT / PACKAGE_DIR).glob("*.proto"))


def generate_protos() -> dict[str, bytes]:
    """{repository-relative path: content} of every generated module (plus the package's __init__)."""
    from grpc_tools import protoc

    include = str(resources.files("grpc_tools") / "_proto")
    files: dict[str, bytes] = {f"{OUTPUT_DIR}/__init__.py": INIT_TEXT}
    with tempfile.TemporaryDirectory() as out:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            *(str(p.relative_to(PROTO_ROOT)) for p in proto_files()),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {PROTO_ROOT / PACKAGE_DIR}; see its messages above")
        generated = Path(out) / PACKAGE_DIR
        for path in sorted(generated.iterdir()):
            files[f"{OUTPUT_DIR}/{path.name}"] = path.read_bytes()
    return files
