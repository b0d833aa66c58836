"""Handlers of `macaron adapters ...`: one AdapterAdmin call each, errors printed with what to do next."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

import grpc
from google.protobuf import json_format

from macaron.v1 import admin_pb2, admin_pb2_grpc


def _target(args: argparse.Namespace) -> str:
    if args.router:
        return args.router
    from macaron.config import load_settings

    rs = load_settings(getattr(args, "config", None)).router
    host = "127.0.0.1" if rs.host in ("0.0.0.0", "::", "") else rs.host
    return f"{host}:{rs.port}"


def _call(args: argparse.Namespace, method: str, request: Any) -> Any:
    metadata = (("authorization", f"Bearer {args.admin_key}"),) if args.admin_key else ()
    with grpc.insecure_channel(_target(args)) as channel:
        stub = admin_pb2_grpc.AdapterAdminStub(channel)
        return getattr(stub, method)(request, timeout=args.timeout, metadata=metadata)


def _guarded(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            hint = {
                grpc.StatusCode.UNAVAILABLE: " (is the router running? pass --router HOST:PORT)",
                grpc.StatusCode.UNAUTHENTICATED: " (pass --admin-key or set MACARON_ADMIN_KEY)",
            }.get(code, "")
            print(f"error: {code.name}: {exc.details()}{hint}", file=sys.stderr)  # type: ignore[attr-defined]
            return 1

    return wrapper


def _print_state(state: admin_pb2.SpecialistVersions) -> None:
    canary = f"{state.canary} ({state.canary_share:.0%} of new sessions)" if state.canary else "-"
    print(f"{state.specialist:<6} stable {state.stable or '(unversioned)':<14} canary {canary}")
    for v in state.versions:
        print(f"         {v.version:<12} {v.status:<12} {v.path}")
    for h in state.history:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(h.at_unix_s))
        why = f" - {h.reason}" if h.reason else ""
        print(f"         {when}Z {h.actor}: {h.action} {h.version}{why}")


@_guarded
def list_versions(args: argparse.Namespace) -> int:
    response = _call(args, "ListAdapters", admin_pb2.ListAdaptersRequest(history_limit=max(1, args.history)))
    if args.json:
        print(json.dumps(json_format.MessageToDict(response), indent=2))
        return 0
    for state in response.specialists:
        _print_state(state)
    return 0


@_guarded
def load(args: argparse.Namespace) -> int:
    _print_state(_call(args, "LoadAdapter", admin_pb2.LoadAdapterRequest(ref=args.ref, path=args.path, reason=args.reason)))
    return 0


@_guarded
def canary(args: argparse.Namespace) -> int:
    if not 0 < args.share <= 100:
        print(f"error: --share {args.share} must be a percentage in (0, 100]", file=sys.stderr)
        return 2
    _print_state(_call(args, "StartCanary",
                       admin_pb2.StartCanaryRequest(ref=args.ref, share=args.share / 100, reason=args.reason)))
    return 0


@_guarded
def promote(args: argparse.Namespace) -> int:
    _print_state(_call(args, "Promote", admin_pb2.PromoteRequest(specialist=args.specialist, reason=args.reason)))
    return 0


@_guarded
def rollback(args: argparse.Namespace) -> int:
    _print_state(_call(args, "Rollback", admin_pb2.RollbackRequest(specialist=args.specialist, reason=args.reason)))
    return 0


@_guarded
def unload(args: argparse.Namespace) -> int:
    _print_state(_call(args, "UnloadAdapter", admin_pb2.UnloadAdapterRequest(ref=args.ref, reason=args.reason)))
    return 0
