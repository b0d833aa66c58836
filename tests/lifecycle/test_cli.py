"""`macaron adapters ...` against a real router: the same operations, errors that say what to do."""

from __future__ import annotations

import asyncio
import json

import pytest

from macaron.cli import main

pytestmark = pytest.mark.slow


async def run(capsys, *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def test_adapters_cli_drives_a_version_through_the_admin_service(routers, version_stack, capsys) -> None:
    server, _, _ = await routers.start()
    target = ["adapters", "--router", f"127.0.0.1:{server.port}"]
    code, out, _ = await run(capsys, *target, "--reason", "new weights", "load", "code@v2",
                             str(version_stack.adapters["v2"]))
    assert code == 0 and "v2" in out and "loaded" in out
    code, out, _ = await run(capsys, *target, "canary", "code@v2", "--share", "10")
    assert code == 0 and "canary v2 (10% of new sessions)" in out
    code, out, _ = await run(capsys, *target, "list", "--json")
    listed = {s["specialist"]: s for s in json.loads(out)["specialists"]}
    assert listed["code"]["canary"] == "v2" and listed["code"]["canaryShare"] == pytest.approx(0.1)
    assert [h["action"] for h in listed["code"]["history"]] == ["load", "canary"]
    assert listed["code"]["history"][0]["reason"] == "new weights"
    code, out, _ = await run(capsys, *target, "rollback", "code")
    assert code == 0 and "canary -" in out
    code, _, err = await run(capsys, *target, "promote", "code")
    assert code == 1 and "FAILED_PRECONDITION" in err and "macaron adapters canary" in err
    code, _, err = await run(capsys, *target, "canary", "code@v2", "--share", "150")
    assert code == 2 and "(0, 100]" in err
    code, _, err = await run(capsys, *target, "load", "coder@v9", "/nowhere")
    assert code == 1 and "INVALID_ARGUMENT" in err
    code, out, _ = await run(capsys, *target, "unload", "code@v2")
    assert code == 0 and "code@v2" not in out
