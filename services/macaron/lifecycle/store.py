"""Version state in the shared store, so that every router replica reads the same.

Keys (under the store's own prefix):

- `lifecycle:state:<specialist>`: a hash whose `state` field is the SpecialistState as JSON;
  all four are read in one round trip (`read_all`). With `router.lifecycle.state_push` (the
  default) each write is announced to every router, which keeps the states in memory
  (`macaron.lifecycle.push`) and acknowledges; the write returns once they all did. Without it,
  routers read the states on every request. Either way a promote or rollback on one router is
  obeyed by every other router from its next request on.
- `lifecycle:history:<specialist>`: the last changes (who, when, what, why) as JSON.
- `lifecycle:usage:<specialist>`: per router and version, the requests in flight and the last
  use, republished by each router (`UsageTracker`); `unload` waits on it.

State is kept for STATE_TTL_S (years): it is configuration, not cache. Writes are
last-writer-wins: operations are rare and made by operators; each carries a revision number.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from macaron.lifecycle.versions import HistoryEntry, SpecialistState, history_from_json, history_to_json
from macaron.store import Store

if TYPE_CHECKING:
    from macaron.lifecycle.push import StatePublisher

STATE_TTL_S = 10 * 365 * 86400.0


def state_key(specialist: str) -> str:
    return f"lifecycle:state:{specialist}"


def history_key(specialist: str) -> str:
    return f"lifecycle:history:{specialist}"


def usage_key(specialist: str) -> str:
    return f"lifecycle:usage:{specialist}"


@dataclass
class VersionStore:
    """Reads and writes SpecialistState; `defaults` gives the state of a specialist never changed."""

    store: Store
    defaults: Mapping[str, SpecialistState]
    publisher: "StatePublisher | None" = None
    """Announces each write to the routers and waits for their acknowledgements (None: routers read per request)."""

    async def read_all(self, specialists: Sequence[str] | None = None) -> dict[str, SpecialistState]:
        """The state of each specialist, in one round trip (raises StoreUnavailableError)."""
        names = list(specialists or self.defaults)
        raws = await self.store.hgetall_many([state_key(n) for n in names])
        return {name: self._decode(name, raw) for name, raw in zip(names, raws)}

    def decode_all(self, raws: Sequence[Mapping[str, bytes]]) -> dict[str, SpecialistState]:
        """Every specialist's state from hashes read in `defaults` order."""
        return {name: self._decode(name, raw) for name, raw in zip(self.defaults, raws)}

    async def read(self, specialist: str) -> SpecialistState:
        return (await self.read_all([specialist]))[specialist]

    def _decode(self, name: str, raw: Mapping[str, bytes]) -> SpecialistState:
        blob = raw.get("state")
        if not blob:
            return self.defaults[name]
        try:
            return SpecialistState.from_json(blob)
        except (ValueError, TypeError, KeyError):
            return self.defaults[name]

    async def write(self, state: SpecialistState, entry: HistoryEntry) -> None:
        """Saves the state, appends the change to its history, then (with a publisher) returns once every live
        router acknowledged it, or after the publisher's timeout."""
        await self.store.hset(state_key(state.specialist), {"state": state.to_json()}, STATE_TTL_S)
        history = history_from_json(await self.store.get(history_key(state.specialist)))
        history.append(entry)
        await self.store.set(history_key(state.specialist), history_to_json(history), STATE_TTL_S)
        if self.publisher is not None:
            await self.publisher.announce(state)

    async def history(self, specialist: str) -> list[HistoryEntry]:
        return history_from_json(await self.store.get(history_key(specialist)))

    async def usage(self, specialist: str, *, stale_s: float) -> dict[str, tuple[int, float]]:
        """Per version: requests in flight on live routers and the last time any router used it."""
        (raw,) = await self.store.hgetall_many([usage_key(specialist)])
        now = time.time()
        out: dict[str, tuple[int, float]] = {}
        for fld, value in raw.items():
            _, _, version = fld.partition("|")
            try:
                inflight_s, last_s, beat_s = value.decode().split(",")
                inflight, last, beat = int(inflight_s), float(last_s), float(beat_s)
            except ValueError:
                continue
            if now - beat > stale_s:
                inflight = 0  # that router is gone: its requests are too
            cur_inflight, cur_last = out.get(version, (0, 0.0))
            out[version] = (cur_inflight + inflight, max(cur_last, last))
        return out
