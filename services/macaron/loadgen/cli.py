"""`macaron loadtest`: multi-turn load against a running stack on this machine, as a table and JSON.

    macaron loadtest --url http://127.0.0.1:8080 --rate 5 --duration 30
    macaron loadtest --grpc 127.0.0.1:50051 --concurrency 8 --duration 60 --json out.json --plot out.png
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

API_KEY_ENV = "MACARON_API_KEY"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `loadtest` subcommand to the `macaron` parser."""
    parser = subparsers.add_parser(
        "loadtest",
        help="load a running stack on this machine (REST or gRPC) and report latency, route mix and errors",
        description="Multi-turn sessions with shared system prompts and growing history, prompts from the routing "
        "data's dev split; open loop (--rate, Poisson) or closed loop (--concurrency). Loopback targets only.",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="The gateway's URL (REST), e.g. http://127.0.0.1:8080.")
    target.add_argument("--grpc", metavar="HOST:PORT", help="The router's address (gRPC, through the SDK).")
    shape = parser.add_mutually_exclusive_group(required=True)
    shape.add_argument("--rate", type=float, help="Open loop: Poisson arrivals at this many requests/s.")
    shape.add_argument("--concurrency", type=int, help="Closed loop: this many sessions, each turn after the last.")
    parser.add_argument("--duration", type=float, default=30.0, help="Seconds of sending (default 30).")
    parser.add_argument("--max-requests", type=int, default=1000, help="Most requests sent (default 1000).")
    parser.add_argument("--timeout", type=float, default=60.0, help="Deadline of one request; later counts as lost.")
    parser.add_argument("--turns", type=int, default=3, help="Turns per session (default 3).")
    parser.add_argument("--max-tokens", type=int, default=16, help="max_tokens of every request (default 16).")
    parser.add_argument("--model", default="macaron-auto", help="Model (macaron-auto lets the router decide).")
    parser.add_argument("--no-stream", action="store_true", help="REST: whole answers instead of SSE (no TTFT).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of prompts and arrivals.")
    parser.add_argument("--json", dest="json_path", help="Write the summary and every request to this JSON file.")
    parser.add_argument("--plot", help="Write latency over time to this PNG (needs matplotlib).")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from macaron.loadgen import LoadConfig, run_load

    config = LoadConfig(
        target=args.url or args.grpc, transport="rest" if args.url else "grpc", rate=args.rate,
        concurrency=args.concurrency, duration_s=args.duration, max_requests=args.max_requests,
        timeout_s=args.timeout, turns=args.turns, max_tokens=args.max_tokens, model=args.model,
        api_key=os.environ.get(API_KEY_ENV), stream=not args.no_stream, seed=args.seed,
    )
    try:
        config.validate()
    except ValueError as exc:
        print(f"macaron loadtest: {exc}", file=sys.stderr)
        return 2
    report = asyncio.run(run_load(config))
    print(report.table())
    if args.json_path:
        report.write_json(args.json_path)
        print(f"wrote {args.json_path}")
    if args.plot:
        try:
            report.plot(args.plot)
            print(f"wrote {args.plot}")
        except RuntimeError as exc:
            print(f"macaron loadtest: {exc}", file=sys.stderr)
    print(json.dumps({k: v for k, v in report.summary().items() if k != "per_specialist"}))
    return 1 if report.lost else 0
