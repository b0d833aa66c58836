"""llama.cpp's server as the CPU peer of the engine: the same model and adapters (converted to
GGUF at the engine's precision, f32), the same mixed-adapter requests, per-request LoRA scales.

Needs a `llama-server` binary and a llama.cpp source tree for its converters (the `gguf` Python
package they use comes from the tree's gguf-py). Decode throughput is the generated tokens of all
requests over the longest request's generation time (the server reports both per request).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx


class LlamaCppError(RuntimeError):
    """llama.cpp could not be run; the message says which step failed."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(cmd: list[str], env: dict[str, str], what: str) -> None:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise LlamaCppError(f"{what} failed: {' | '.join(tail)}")


def convert(llama_cpp_dir: Path, model_dir: Path, adapters: dict[str, Path], out: Path) -> tuple[Path, dict[str, Path]]:
    """GGUF files (f32) of the model and of each PEFT adapter."""
    out.mkdir(parents=True, exist_ok=True)
    # the converters import gguf from the tree, and sentencepiece (scripts/build_llamacpp.sh puts it in
    # the tree's .converter-deps; else it must be importable already)
    paths = (str(llama_cpp_dir / "gguf-py"), str(llama_cpp_dir / ".converter-deps"), os.environ.get("PYTHONPATH"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    model = out / "model-f32.gguf"
    _run([sys.executable, str(llama_cpp_dir / "convert_hf_to_gguf.py"), str(model_dir), "--outtype", "f32",
          "--outfile", str(model)], env, "converting the model to GGUF")
    loras: dict[str, Path] = {}
    for name, path in adapters.items():
        target = out / f"{name}.gguf"
        _run([sys.executable, str(llama_cpp_dir / "convert_lora_to_gguf.py"), str(path), "--base", str(model_dir),
              "--outtype", "f32", "--outfile", str(target)], env, f"converting adapter {name} to GGUF")
        loras[name] = target
    return model, loras


def llamacpp_decode_tps(
    server: str, llama_cpp_dir: str | None, model_dir: Path, adapters: dict[str, Path], prompts: list[list[int]],
    names: list[str], new_tokens: int, workdir: Path, threads: int,
) -> float:
    """Decode tokens/s of llama-server on `prompts`, row i with adapter names[i] at scale 1."""
    if not llama_cpp_dir:
        raise LlamaCppError("no llama.cpp source tree for its GGUF converters (--llama-cpp-dir or $LLAMA_CPP_DIR)")
    model, loras = convert(Path(llama_cpp_dir), model_dir, adapters, workdir)
    order = list(loras)
    port = _free_port()
    ctx = len(prompts) * (max(len(p) for p in prompts) + new_tokens + 16)
    cmd = [server, "-m", str(model), "--port", str(port), "--host", "127.0.0.1", "-np", str(len(prompts)),
           "-c", str(ctx), "-t", str(threads), "--lora-init-without-apply"]
    # one --lora with comma-separated files: the server keeps only the last of repeated --lora flags
    cmd += ["--lora", ",".join(str(loras[name]) for name in order)]
    log = open(workdir / "llama-server.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0)) as client:
            deadline = time.monotonic() + 180
            while True:
                if proc.poll() is not None:
                    raise LlamaCppError(f"llama-server exited with {proc.returncode} (log: {workdir / 'llama-server.log'})")
                try:
                    if client.get(f"{base}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise LlamaCppError("llama-server did not become healthy within 180 s")
                time.sleep(0.5)

            loaded = client.get(f"{base}/lora-adapters").json()
            if len(loaded) != len(order):
                raise LlamaCppError(f"llama-server loaded {len(loaded)} adapters, expected {len(order)}")

            def one(i: int) -> dict:
                lora = [{"id": j, "scale": 1.0 if name == names[i] else 0.0} for j, name in enumerate(order)]
                body = {"prompt": prompts[i], "n_predict": new_tokens, "temperature": 0, "ignore_eos": True,
                        "cache_prompt": False, "lora": lora}
                r = client.post(f"{base}/completion", json=body)
                if r.status_code != 200:
                    raise LlamaCppError(f"llama-server answered {r.status_code}: {r.text[:200]}")
                return json.loads(r.text)["timings"]

            one(0)  # warm-up
            with ThreadPoolExecutor(len(prompts)) as pool:
                timings = list(pool.map(one, range(len(prompts))))
        tokens = sum(t["predicted_n"] for t in timings)
        return tokens / (max(t["predicted_ms"] for t in timings) / 1e3)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
