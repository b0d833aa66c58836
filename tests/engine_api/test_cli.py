"""`macaron engine`'s flags and configuration errors (the served engine itself runs through the CLI in conftest).

In process, with the same `--config` + subcommand layout as the `macaron` dispatcher, so these
checks cost no interpreter start.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from macaron.engine import cli


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="macaron")
    top.add_argument("--config")
    cli.add_parser(top.add_subparsers(dest="command", required=True))
    return top


def test_flags_are_generated_from_engine_args(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["engine", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--host", "--port", "--model-path", "--lora-paths", "--max-loras-per-batch", "--max-queued-requests",
                 "--incremental-streaming-output", "--served-model-name"):
        assert flag in text
    args = parser().parse_args(["engine", "--port", "31999", "--lora-paths", "chat=/a", "code@v2=/b"])
    assert (args.port, args.lora_paths) == (31999, ["chat=/a", "code@v2=/b"])


def test_bad_configuration_exits_with_a_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = parser().parse_args(["--config", str(tmp_path / "missing.yaml"), "engine"])
    assert missing.func(missing) == 2 and "missing.yaml" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine:\n  max_queued_requests: lots\n")
    invalid = parser().parse_args(["--config", str(bad), "engine"])
    assert invalid.func(invalid) == 2 and "max_queued_requests" in capsys.readouterr().err
