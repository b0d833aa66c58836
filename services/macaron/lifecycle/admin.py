"""The `macaron.v1.AdapterAdmin` servicer: authenticate an admin key, call the operation, map errors.

Registered on the router's gRPC server (never on the gateway). Admin keys are separate from
API keys (router.lifecycle.admin_keys) and checked by the same `macaron.auth.Guard`.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Sequence

import grpc

from macaron import telemetry
from macaron.auth import AuthError, Guard
from macaron.auth.guard import is_loopback
from macaron.auth.settings import AuthSettings
from macaron.lifecycle.gate import GateRefusedError
from macaron.lifecycle.operations import Lifecycle, OperationError
from macaron.lifecycle.settings import LifecycleSettings
from macaron.lifecycle.versions import HistoryEntry, InvalidRefError, SpecialistState, VersionError, parse_ref
from macaron.ports import SPECIALISTS
from macaron.store import Store, StoreUnavailableError
from macaron.v1 import admin_pb2, admin_pb2_grpc

log = logging.getLogger(__name__)
DEFAULT_HISTORY = 20


SERVICE_NAME = admin_pb2.DESCRIPTOR.services_by_name["AdapterAdmin"].full_name


def admin_guard(settings: LifecycleSettings, store: Store, *, host: str) -> Guard:
    """A Guard over the admin keys. Without any, only a loopback router answers (anyone there is
    the operator); elsewhere every call is UNAUTHENTICATED until keys are configured."""
    dev_mode = not settings.admin_keys and is_loopback(host)
    return Guard(AuthSettings(api_keys=settings.admin_keys, dev_mode=dev_mode), store, dev_mode=dev_mode)


def add_admin_service(server: grpc.aio.Server, ops: Lifecycle, settings: LifecycleSettings, store: Store, *,
                      host: str) -> str:
    """Registers AdapterAdmin on the router's server; returns its name (for health and reflection)."""
    admin_pb2_grpc.add_AdapterAdminServicer_to_server(
        AdapterAdminServicer(ops, admin_guard(settings, store, host=host)), server)
    return SERVICE_NAME


def state_to_proto(state: SpecialistState, history: Sequence[HistoryEntry] = ()) -> admin_pb2.SpecialistVersions:
    return admin_pb2.SpecialistVersions(
        specialist=state.specialist, adapter=state.adapter, stable=state.stable, canary=state.canary,
        canary_share=state.canary_share, revision=state.revision,
        versions=[admin_pb2.LoadedVersion(version=v, path=i.path, status=i.status, loaded_at_unix_s=i.loaded_at)
                  for v, i in sorted(state.versions.items())],
        history=[admin_pb2.VersionChange(at_unix_s=h.at, actor=h.actor, action=h.action, version=h.version,
                                         reason=h.reason, detail=h.detail) for h in history],
    )


class AdapterAdminServicer(admin_pb2_grpc.AdapterAdminServicer):
    """Thin: every RPC is one Lifecycle call."""

    def __init__(self, ops: Lifecycle, guard: Guard) -> None:
        self.ops = ops
        self.guard = guard

    async def _actor(self, context: grpc.aio.ServicerContext) -> str:
        metadata = telemetry.metadata_to_dict(context.invocation_metadata())
        auth = metadata.get("authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else metadata.get("x-api-key")
        try:
            principal = self.guard.authenticate(token or None)
        except AuthError as exc:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{exc} (an admin key: router.lifecycle.admin_keys)")
        return principal.name

    async def _run(self, context: grpc.aio.ServicerContext,
                   call: Callable[[], Awaitable[SpecialistState]]) -> admin_pb2.SpecialistVersions:
        """Runs one operation; its errors become statuses (INVALID_ARGUMENT, FAILED_PRECONDITION, ...)."""
        try:
            return state_to_proto(await call())
        except InvalidRefError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except VersionError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except GateRefusedError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except OperationError as exc:
            code = grpc.StatusCode.DEADLINE_EXCEEDED if "still in use" in str(exc) else grpc.StatusCode.UNAVAILABLE
            await context.abort(code, str(exc))
        except StoreUnavailableError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the shared store does not answer ({exc}): retry later")
        raise AssertionError("unreachable")

    async def ListAdapters(self, request: admin_pb2.ListAdaptersRequest,
                           context: grpc.aio.ServicerContext) -> admin_pb2.ListAdaptersResponse:
        await self._actor(context)
        limit = request.history_limit or DEFAULT_HISTORY
        try:
            listed = await self.ops.list()
        except StoreUnavailableError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the shared store does not answer ({exc}): retry later")
        return admin_pb2.ListAdaptersResponse(
            specialists=[state_to_proto(state, history[-limit:]) for state, history in listed.values()])

    async def LoadAdapter(self, request: admin_pb2.LoadAdapterRequest,
                          context: grpc.aio.ServicerContext) -> admin_pb2.SpecialistVersions:
        actor = await self._actor(context)
        if not request.path:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "path is empty: give the adapter directory")
        return await self._run(context, lambda: self.ops.load(
            parse_ref(request.ref), request.path, actor=actor, reason=request.reason))

    async def StartCanary(self, request: admin_pb2.StartCanaryRequest,
                          context: grpc.aio.ServicerContext) -> admin_pb2.SpecialistVersions:
        actor = await self._actor(context)
        return await self._run(context, lambda: self.ops.canary(
            parse_ref(request.ref), request.share, actor=actor, reason=request.reason))

    async def Promote(self, request: admin_pb2.PromoteRequest,
                      context: grpc.aio.ServicerContext) -> admin_pb2.SpecialistVersions:
        actor = await self._actor(context)
        return await self._run(context, lambda: self.ops.promote(
            self._specialist(request.specialist), actor=actor, reason=request.reason))

    async def Rollback(self, request: admin_pb2.RollbackRequest,
                       context: grpc.aio.ServicerContext) -> admin_pb2.SpecialistVersions:
        actor = await self._actor(context)
        return await self._run(context, lambda: self.ops.rollback(
            self._specialist(request.specialist), actor=actor, reason=request.reason))

    async def UnloadAdapter(self, request: admin_pb2.UnloadAdapterRequest,
                            context: grpc.aio.ServicerContext) -> admin_pb2.SpecialistVersions:
        actor = await self._actor(context)
        return await self._run(context, lambda: self.ops.unload(
            parse_ref(request.ref), actor=actor, reason=request.reason))

    @staticmethod
    def _specialist(name: str) -> str:
        if name not in SPECIALISTS:
            raise InvalidRefError(f"specialist {name!r} must be one of {', '.join(SPECIALISTS)}")
        return name
