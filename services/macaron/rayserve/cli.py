"""`macaron ray`: the stack as Ray Serve deployments, on a local Ray cluster or one it joins.

    macaron ray                                   # local cluster, gateway on http://127.0.0.1:8000/v1
    macaron --config examples/macaron.yaml ray --address auto   # join a running cluster (e.g. in a KubeRay pod)

Same configuration file as `macaron serve`; the `ray:` section sets replicas, autoscaling and
resources per deployment. Ctrl-C or SIGTERM deletes the application (replicas drain) and, for a
local cluster, stops it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

RAY_AUTH_ENV = "RAY_AUTH_MODE"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `ray` subcommand to the `macaron` parser."""
    parser = subparsers.add_parser(
        "ray",
        help="run the stack as Ray Serve deployments (engine, specialists, router, gateway ingress)",
        description="Deploy the engine replicas, the four specialists, the router and the OpenAI-compatible gateway "
        "as one Ray Serve application, built from the same configuration as `macaron serve`.",
    )
    parser.add_argument("--address", help="Ray cluster to join (ray.address; `auto` inside a cluster); default: a local one.")
    parser.add_argument("--num-cpus", type=int, help="CPUs of a local cluster (ray.num_cpus).")
    parser.add_argument("--host", help="Serve HTTP proxy address (ray.http_host; default 127.0.0.1).")
    parser.add_argument("--port", type=int, help="Serve HTTP proxy port (ray.http_port; default 8000).")
    parser.set_defaults(func=run)
    return parser


def connect(settings: Any) -> None:
    """Starts a local Ray cluster, or joins `ray.address`."""
    import ray

    rs = settings.ray
    os.environ.setdefault(RAY_AUTH_ENV, "disabled")  # a local dev cluster: no token file written under $HOME
    if not ray.is_initialized():
        if rs.address:
            ray.init(address=rs.address, include_dashboard=False)
        else:
            ray.init(num_cpus=rs.num_cpus, include_dashboard=False)


def start(settings: Any) -> str:
    """Starts Ray (local or joined) and the application; returns the gateway's base URL."""
    from ray import serve

    from macaron.rayserve.app import build_app

    rs = settings.ray
    connect(settings)
    serve.start(http_options={"host": rs.http_host, "port": rs.http_port})
    serve.run(build_app(settings), name=rs.app_name, route_prefix=rs.route_prefix, blocking=False)
    host = f"[{rs.http_host}]" if ":" in rs.http_host else rs.http_host
    return f"http://{host}:{rs.http_port}{rs.route_prefix.rstrip('/')}"


def stop(settings: Any, *, shutdown_ray: bool) -> None:
    """Deletes the application (its replicas drain), then stops Serve and, if asked, Ray."""
    import ray
    from ray import serve

    serve.delete(settings.ray.app_name)
    serve.shutdown()
    if shutdown_ray:
        ray.shutdown()


def run(args: argparse.Namespace) -> int:
    """Resolves the settings, deploys, waits for Ctrl-C / SIGTERM, then cleans up."""
    from macaron.auth import InsecureBindError, resolve_dev_mode
    from macaron.config import ConfigError, load_settings
    from macaron.serve import curl_example

    section: dict[str, Any] = {}
    for flag, key in (("address", "address"), ("num_cpus", "num_cpus"), ("host", "http_host"), ("port", "http_port")):
        if getattr(args, flag) is not None:
            section[key] = getattr(args, flag)
    try:
        settings = load_settings(args.config, overrides={"ray": section} if section else None)
        dev_mode = resolve_dev_mode(settings.auth, settings.ray.http_host)
    except (ConfigError, ValueError, InsecureBindError) as exc:
        print(f"macaron ray: {exc}", file=sys.stderr)
        return 2
    print("Starting Ray and deploying the application (a minute on a small machine) ...", file=sys.stderr, flush=True)
    connect(settings)
    # After ray.init, which installs a SIGTERM handler that aborts the process: ours stops cleanly.
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    url = start(settings)
    print(f"\nMacaron Serve on Ray Serve is ready: {url}/v1 (application {settings.ray.app_name!r}).\n"
          f"Try it:\n  {curl_example(url, dev_mode)}\nPress Ctrl-C to stop.\n", flush=True)
    stopping.wait()
    print("Stopping: deleting the application (replicas drain) ...", file=sys.stderr, flush=True)
    stop(settings, shutdown_ray=not settings.ray.address)
    return 0
