"""The operations on adapter versions: load, canary, promote, rollback, unload (and list).

Every operation reads the specialist's state from the shared store, checks it is allowed, acts
on the engines when needed, then writes the new state with a history entry (who, when, what,
why). Routers read the state on every request, so the change is obeyed at once everywhere.
Operations are serialized per router; two made through two routers at the same instant are
last-writer-wins (the store offers no compare-and-set here): operators make them one at a time,
and the automatic rollback only acts on the canary it judged.

- load: `/load_lora_adapter` on every base-group replica, then one short generation with the
  version on each; only then is the version recorded as loaded (so it may take traffic). If any
  replica fails, the version is unloaded again from those that took it.
- canary: the promotion gate (when configured) runs first; then a share of new sessions.
- promote: the canary becomes stable; sessions started on the old stable keep it.
- rollback: the canary is dropped and marked rolled back: all traffic, pinned sessions
  included, goes to stable from the next request on.
- unload: waits until no router has used the version for `unload_idle_s`, removes it from
  the state, waits for requests routed meanwhile, then unloads it from every replica.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Awaitable, Callable, Mapping, Sequence

from macaron.engine_client import EngineClientError
from macaron.lifecycle.engines import EngineClients
from macaron.lifecycle.gate import EvalTarget, GateRefusedError, PromotionGate
from macaron.lifecycle.inventory import AdapterInventory
from macaron.lifecycle.settings import LifecycleSettings
from macaron.lifecycle.store import VersionStore
from macaron.lifecycle.versions import HistoryEntry, InvalidRefError, SpecialistState, VersionError, VersionInfo, VersionRef

log = logging.getLogger(__name__)


class OperationError(RuntimeError):
    """An operation failed on the engines or timed out (the message says what to do next)."""


class Lifecycle:
    """Version operations over the shared store and the base-group replicas."""

    def __init__(
        self,
        settings: LifecycleSettings,
        versions: VersionStore,
        inventory: AdapterInventory,
        engines: EngineClients,
        replicas: Callable[[], Awaitable[Sequence[str]]],
        *,
        gate: PromotionGate | None = None,
        check_prompt_ids: Sequence[int] = (1, 2, 3),
    ) -> None:
        self.settings = settings
        self.versions = versions
        self.inventory = inventory
        self.engines = engines
        self.replicas = replicas
        self.gate = gate
        self.check_prompt_ids = list(check_prompt_ids)
        self._lock = asyncio.Lock()
        self._provisioning: set[tuple[str, str]] = set()

    # ------------------------------------------------------------ reading

    async def list(self) -> dict[str, tuple[SpecialistState, list[HistoryEntry]]]:
        states = await self.versions.read_all()
        return {name: (state, await self.versions.history(name)) for name, state in states.items()}

    # ------------------------------------------------------------ engines

    async def _load_on(self, replica: str, name: str, path: str) -> None:
        client = self.engines.get(replica)
        timeout = self.settings.engine_timeout_s
        try:
            result = await client.load_lora_adapter(name, path, timeout=timeout)
        except EngineClientError as exc:
            if "already loaded" not in str(exc):
                raise OperationError(f"replica {replica} refused to load {name} from {path}: {exc}") from exc
        else:
            if not result.success and "already loaded" not in (result.error_message or ""):
                raise OperationError(f"replica {replica} refused to load {name}: {result.error_message}")
        await self._check_on(replica, name)

    async def _check_on(self, replica: str, name: str) -> None:
        """One short greedy generation with the version: it answers before it may take traffic."""
        try:
            out = await self.engines.get(replica).generate(
                input_ids=self.check_prompt_ids, lora_path=name,
                sampling_params={"max_new_tokens": self.settings.check_max_new_tokens, "temperature": 0.0},
                timeout=self.settings.engine_timeout_s,
            )
        except EngineClientError as exc:
            raise OperationError(f"{name} is loaded on {replica} but does not answer: {exc}") from exc
        if out.meta_info.completion_tokens < 1:
            raise OperationError(f"{name} on {replica} generated no token")

    async def _unload_on(self, replica: str, name: str) -> None:
        try:
            await self.engines.get(replica).unload_lora_adapter(name, timeout=self.settings.engine_timeout_s)
        except EngineClientError as exc:
            if "unknown adapter" not in str(exc) and "not loaded" not in str(exc):
                raise OperationError(f"replica {replica} failed to unload {name}: {exc}") from exc

    async def _all_replicas(self) -> list[str]:
        replicas = list(await self.replicas())
        if not replicas:
            raise OperationError("no base-group replica is discovered: start the engines (or fix discovery) first")
        return replicas

    # ------------------------------------------------------------ operations

    async def load(self, ref: VersionRef, path: str, *, actor: str, reason: str = "") -> SpecialistState:
        async with self._lock:
            state = await self.versions.read(ref.specialist)
            if ref.version == state.stable or ref.version in state.versions:
                raise VersionError(f"{ref} is already loaded; unload it first or pick a new version")
            name = state.engine_name(ref.version)
            replicas = await self._all_replicas()
            t0 = time.monotonic()
            results = await asyncio.gather(*(self._load_on(r, name, path) for r in replicas), return_exceptions=True)
            failed = [(r, e) for r, e in zip(replicas, results) if isinstance(e, BaseException)]
            if failed:
                await asyncio.gather(*(self._unload_on(r, name) for r in replicas), return_exceptions=True)
                raise OperationError("; ".join(str(e) for _, e in failed) + f" ({ref} was not loaded anywhere)")
            await self.inventory.refresh_now(replicas, notify=False)
            versions = {**state.versions, ref.version: VersionInfo(path, "loaded", time.time())}
            new = state.changed(versions=versions)
            await self.versions.write(new, HistoryEntry(time.time(), actor, "load", ref.version, reason,
                                                        f"{len(replicas)} replica(s) in {time.monotonic() - t0:.2f} s"))
            return new

    async def canary(self, ref: VersionRef, share: float, *, actor: str, reason: str = "") -> SpecialistState:
        if not 0.0 < share <= 1.0:
            raise InvalidRefError(f"canary share {share} must be in (0, 1] (the CLI takes a percentage)")
        async with self._lock:
            state = await self.versions.read(ref.specialist)
            info = state.versions.get(ref.version)
            if ref.version == state.stable:
                raise VersionError(f"{ref} is already stable")
            if info is not None and info.status == "rolled_back":
                raise VersionError(f"{ref} was rolled back: unload it, then load a fixed version under a new name")
            if info is None:
                raise VersionError(f"{ref} is not loaded: run `macaron adapters load {ref} PATH` first")
            if self.gate is not None:
                result = await self._run_gate(state, ref)
                if not result.passed:
                    await self.versions.write(state.changed(), HistoryEntry(
                        time.time(), actor, "gate_refused", ref.version, result.reason, reason))
                    raise GateRefusedError(result)
                reason = f"{reason}; {result.reason}" if reason else result.reason
            new = state.changed(canary=ref.version, canary_share=share)
            await self.versions.write(new, HistoryEntry(time.time(), actor, "canary", ref.version, reason,
                                                        f"share {share:.2%}"))
            return new

    async def _run_gate(self, state: SpecialistState, ref: VersionRef):  # noqa: ANN202 - GateResult
        assert self.gate is not None
        replicas = await self._all_replicas()
        cand_name, stable_name = state.engine_name(ref.version), state.engine_name(state.stable)
        replica = next((r for r in replicas if self.inventory.has(r, cand_name) and self.inventory.has(r, stable_name)),
                       replicas[0])
        return await self.gate.evaluate(
            EvalTarget(ref.specialist, ref.version, cand_name, replica),
            EvalTarget(ref.specialist, state.stable, stable_name, replica),
        )

    async def promote(self, specialist: str, *, actor: str, reason: str = "") -> SpecialistState:
        async with self._lock:
            state = await self.versions.read(specialist)
            if not state.canary:
                raise VersionError(f"{specialist} has no canary to promote: start one with `macaron adapters canary`")
            old = state.stable
            versions = dict(state.versions)
            versions.setdefault(old, VersionInfo("", "loaded", 0.0))  # the configured one: sessions keep it
            versions.pop(state.canary, None)  # stable is tracked as `stable`
            versions[state.canary] = state.versions[state.canary]
            new = state.changed(stable=state.canary, canary="", canary_share=0.0, versions=versions)
            await self.versions.write(new, HistoryEntry(time.time(), actor, "promote", state.canary, reason,
                                                        f"previous stable {old or '(unversioned)'}"))
            return new

    async def rollback(self, specialist: str, *, actor: str, reason: str = "",
                       expected: str | None = None) -> SpecialistState:
        """`expected`: roll back only if that version is still the canary (the automatic rollback's check)."""
        async with self._lock:
            state = await self.versions.read(specialist)
            if not state.canary:
                raise VersionError(f"{specialist} has no canary to roll back (stable is {state.stable or 'unversioned'})")
            if expected is not None and state.canary != expected:
                raise VersionError(f"{specialist}@{expected} is no longer the canary ({state.canary} is)")
            versions = dict(state.versions)
            if state.canary in versions:
                versions[state.canary] = replace(versions[state.canary], status="rolled_back")
            new = state.changed(canary="", canary_share=0.0, versions=versions)
            await self.versions.write(new, HistoryEntry(time.time(), actor, "rollback", state.canary, reason))
            return new

    async def unload(self, ref: VersionRef, *, actor: str, reason: str = "") -> SpecialistState:
        s = self.settings
        state = await self.versions.read(ref.specialist)
        if ref.version in state.in_use():
            raise VersionError(f"{ref} is {'stable' if ref.version == state.stable else 'the canary'}: "
                               "promote another version or roll it back first")
        if ref.version not in state.versions:
            raise VersionError(f"{ref} is not loaded")
        deadline = time.monotonic() + s.unload_timeout_s
        await self._wait_idle(ref, deadline, s.unload_idle_s)
        async with self._lock:
            state = await self.versions.read(ref.specialist)
            if ref.version in state.in_use() or ref.version not in state.versions:
                raise VersionError(f"{ref} changed while waiting: it is in use again or already unloaded")
            versions = {k: v for k, v in state.versions.items() if k != ref.version}
            new = state.changed(versions=versions)
            await self.versions.write(new, HistoryEntry(time.time(), actor, "unload", ref.version, reason))
        # requests routed before that write may still be starting: let them finish first
        await asyncio.sleep(s.usage_heartbeat_s * 1.5)
        await self._wait_idle(ref, deadline, 0.0)
        name = state.engine_name(ref.version)
        replicas = list(await self.replicas())
        results = await asyncio.gather(*(self._unload_on(r, name) for r in replicas), return_exceptions=True)
        failed = [str(e) for e in results if isinstance(e, BaseException)]
        await self.inventory.refresh_now(replicas, notify=False)
        if failed:
            raise OperationError("; ".join(failed) + " (the version takes no traffic; retry the unload later)")
        return new

    async def _wait_idle(self, ref: VersionRef, deadline: float, idle_s: float) -> None:
        s = self.settings
        while True:
            usage = await self.versions.usage(ref.specialist, stale_s=s.usage_stale_s)
            in_flight, last = usage.get(ref.version, (0, 0.0))
            if in_flight == 0 and time.time() - last >= idle_s:
                return
            if time.monotonic() > deadline:
                raise OperationError(f"{ref} is still in use ({in_flight} request(s) in flight) after "
                                     f"{s.unload_timeout_s:.0f} s; it takes no new sessions: retry the unload later")
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------ replicas that join later

    async def provision(self, replicas: Sequence[str], states: Mapping[str, SpecialistState]) -> None:
        """Gives each readable replica the loaded versions it lacks (a replica that joined later)."""
        jobs = []
        for state in states.values():
            for version, info in state.versions.items():
                if info.status != "loaded" or not info.path:
                    continue
                name = state.engine_name(version)
                for replica in replicas:
                    if self.inventory.has(replica, name) is False and (replica, name) not in self._provisioning:
                        jobs.append((replica, name, info.path))
        if not jobs:
            return

        async def one(replica: str, name: str, path: str) -> None:
            self._provisioning.add((replica, name))
            try:
                await self._load_on(replica, name, path)
                log.info("gave %s to replica %s, which lacked it", name, replica)
            except OperationError as exc:
                log.warning("cannot give %s to %s: %s", name, replica, exc)
            finally:
                self._provisioning.discard((replica, name))

        await asyncio.gather(*(one(*job) for job in jobs))
        await self.inventory.refresh_now(replicas, notify=False)
