"""LoRA adapters at run time: the loaded set (names, versions, limits) and the pool of slots.

Like SGLang, adapters loaded in memory (bounded by max_loaded_loras) are distinct from the
slots the forward pass reads: `max_loras_per_batch` of them. A running request holds its
adapter's slot; an unreferenced, unpinned slot is evicted least-recently-used when another
adapter needs one; pinned adapters may hold at most slots - 1, so one slot always turns over.

Where the slots live depends on the device. On CPU the host copy *is* device memory, so a slot
only points at its adapter's own tensors (nothing is held twice, each row reads its own rank).
On an accelerator the pool holds device copies, stacked [layers, slots, modules x max rank, in] per
projection (the modules that read the same input side by side, so one shrink serves them) and
[layers, slots, max rank, out] per module, as SGLang's memory pool does, and a slot is a copy
paged in from the host; `nbytes` is what those device tensors occupy.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import torch

from macaron.engine.lora_adapter import LoRAAdapter, LoRAError, LoRAExpand, LoRAShrink, read_adapter
from macaron.engine.models.llama import LORA_MODULES, PROJECTIONS, ModelShape

__all__ = ["LoRAAdapter", "LoRAError", "LoRAManager", "LoRAPool", "pool_bytes"]
_load_ids = count(1)


def pool_bytes(shape: ModelShape, num_slots: int, rank: int, modules: frozenset[str] | tuple[str, ...], dtype_bytes: int) -> int:
    """Bytes of a stacked device pool: slots x rank x (in + out) over every layer and module."""
    per_rank = sum(sum(shape.in_out(m)) for m in modules)
    return shape.num_layers * num_slots * rank * per_rank * dtype_bytes


@dataclass
class LoRAPool:
    """The slots a batch's rows read; `slot_lora` gives one slot's LoRAShrink for a projection."""

    shape: ModelShape
    num_slots: int
    dtype: torch.dtype
    device: torch.device
    stacked: bool | None = None
    """Keep device copies in stacked tensors (default: on any device but the CPU)."""
    fused_shrink: bool = True
    """One shrink matmul per projection and segment for the modules that read the same input (False:
    one per module, the path before; same weights, kept to compare logits and speed)."""
    rank: int = 0
    modules: frozenset[str] = frozenset()
    a: dict[str, torch.Tensor] = field(default_factory=dict)
    """Stacked pool: projection -> [layers, slots, modules x rank, in], each targeted module of the
    projection at its own block of `rank` rows (one shrink matmul per projection, as on CPU)."""
    bt: dict[str, torch.Tensor] = field(default_factory=dict)
    """Stacked pool: module -> [layers, slots, rank, out]."""
    slot_adapter: list[LoRAAdapter | None] = field(default_factory=list)
    slot_fused: list[dict[tuple[int, str], LoRAShrink]] = field(default_factory=list)
    """Per slot, (layer, projection) -> LoRAShrink: the host copy's own (CPU) or views of the stacked tensors."""
    slot_refs: list[int] = field(default_factory=list)
    slot_last_used: list[int] = field(default_factory=list)
    _clock: int = 0

    def __post_init__(self) -> None:
        if self.stacked is None:
            self.stacked = self.device.type != "cpu"
        self.slot_adapter = [None] * self.num_slots
        self.slot_fused = [{} for _ in range(self.num_slots)]
        self.slot_refs = [0] * self.num_slots
        self.slot_last_used = [0] * self.num_slots

    @property
    def nbytes(self) -> int:
        """Bytes of the device-side slot tensors (0 on CPU, where slots read the host copies)."""
        return sum(t.nbytes for t in (*self.a.values(), *self.bt.values()))

    def slot_lora(self, slot: int, layer: int, projection: str) -> LoRAShrink | None:
        """The adapter in `slot` on one projection of one layer; None if it targets none of its modules."""
        return self.slot_fused[slot].get((layer, projection))

    def _present(self, projection: str) -> list[str]:
        return [m for m in PROJECTIONS[projection] if m in self.modules]

    def ensure_capacity(self, rank: int, modules: frozenset[str]) -> None:
        """Grows the stacked device tensors (rank, modules) and re-copies resident adapters."""
        if not self.stacked or (rank <= self.rank and modules <= self.modules):
            return
        self.rank = max(self.rank, rank)
        self.modules = self.modules | modules
        L, S, R = self.shape.num_layers, self.num_slots, self.rank
        self.a, self.bt = {}, {}
        for projection in PROJECTIONS:
            present = self._present(projection)
            if present:
                in_f = self.shape.in_out(present[0])[0]
                self.a[projection] = torch.zeros(L, S, len(present) * R, in_f, dtype=self.dtype, device=self.device)
            for m in present:
                self.bt[m] = torch.zeros(L, S, R, self.shape.in_out(m)[1], dtype=self.dtype, device=self.device)
        for slot, adapter in enumerate(self.slot_adapter):
            if adapter is not None:
                self._copy_in(adapter, slot)

    def _copy_in(self, adapter: LoRAAdapter, slot: int) -> None:
        if not self.stacked:
            self.slot_fused[slot] = adapter.fused(self.shape)
            return
        R = self.rank
        fused: dict[tuple[int, str], LoRAShrink] = {}
        for projection, modules in PROJECTIONS.items():
            present = self._present(projection)
            columns = self.shape.columns(projection)
            for layer in range(self.shape.num_layers):
                expands, used = [], 0
                for i, m in enumerate(present):
                    w = adapter.weights.get((layer, m))
                    if w is None:
                        continue
                    a, bt = w
                    r = a.shape[0]
                    self.a[projection][layer, slot, i * R : i * R + r].copy_(a, non_blocking=True)
                    self.bt[m][layer, slot, :r].copy_(bt, non_blocking=True)
                    cols = None if len(modules) == 1 else slice(*columns[m])
                    expands.append(LoRAExpand(slice(i * R, i * R + r), cols, self.bt[m][layer, slot, :r]))
                    used = i * R + r
                if len(expands) == 1 and expands[0].ranks.start == 0:  # the shrink reads its rows alone
                    expands[0] = expands[0]._replace(ranks=None)
                if expands:  # rows past the last module's rank are padding: the shrink skips them
                    fused[(layer, projection)] = LoRAShrink(self.a[projection][layer, slot, :used].t(), tuple(expands))
        self.slot_fused[slot] = fused

    def acquire(self, adapter: LoRAAdapter) -> int:
        """Slot for `adapter` (paging it in, evicting an idle slot LRU); -1 when all slots are busy."""
        self._clock += 1
        slot = adapter.slot
        if slot < 0:
            slot = self._free_slot()
            if slot < 0:
                return -1
            old = self.slot_adapter[slot]
            if old is not None:
                old.slot = -1
            self.ensure_capacity(adapter.rank, adapter.target_modules)
            self._copy_in(adapter, slot)
            self.slot_adapter[slot] = adapter
            adapter.slot = slot
        self.slot_refs[slot] += 1
        self.slot_last_used[slot] = self._clock
        return slot

    def can_acquire(self, adapter: LoRAAdapter) -> bool:
        return adapter.slot >= 0 or self._free_slot() >= 0

    def release(self, slot: int) -> None:
        assert self.slot_refs[slot] > 0
        self.slot_refs[slot] -= 1

    def evict(self, adapter: LoRAAdapter) -> None:
        """Drops an unloaded adapter from its slot."""
        if adapter.slot >= 0:
            assert self.slot_refs[adapter.slot] == 0
            self.slot_adapter[adapter.slot] = None
            self.slot_fused[adapter.slot] = {}
            adapter.slot = -1

    def _free_slot(self) -> int:
        empty = [s for s in range(self.num_slots) if self.slot_adapter[s] is None]
        if empty:
            return empty[0]
        idle = [
            s
            for s in range(self.num_slots)
            if self.slot_refs[s] == 0 and not self.slot_adapter[s].pinned  # type: ignore[union-attr]
        ]
        return min(idle, key=lambda s: self.slot_last_used[s]) if idle else -1


class LoRAManager:
    """Loaded adapters by name (versions are just names), their limits, and the slot pool."""

    def __init__(
        self,
        shape: ModelShape,
        *,
        dtype: torch.dtype,
        device: torch.device,
        max_loras_per_batch: int,
        max_loaded_loras: int | None,
        max_lora_rank: int | None,
        target_modules: list[str],
        stacked_pool: bool | None = None,
    ) -> None:
        if max_loras_per_batch < 1:
            raise LoRAError(f"max_loras_per_batch must be at least 1, got {max_loras_per_batch}")
        self.shape = shape
        self.dtype = dtype
        self.max_loaded_loras = max_loaded_loras
        self.max_lora_rank = max_lora_rank
        unknown = set(target_modules) - set(LORA_MODULES)
        if unknown:
            raise LoRAError(f"lora_target_modules: unknown {sorted(unknown)}; known {sorted(LORA_MODULES)}")
        self.allowed_modules = frozenset(target_modules) if target_modules else None
        self.adapters: dict[str, LoRAAdapter] = {}
        self.pool = LoRAPool(shape, max_loras_per_batch, dtype, device, stacked=stacked_pool)
        if max_lora_rank is not None and self.allowed_modules:
            self.pool.ensure_capacity(max_lora_rank, self.allowed_modules)
        self.lock = threading.Lock()
        """Guards `adapters` between the engine thread and callers that validate requests."""

    def read(self, name: str, path: str | Path) -> LoRAAdapter:
        """Reads and checks an adapter against the limits; safe to call from any thread."""
        adapter = read_adapter(name, path, self.shape, self.dtype)
        if self.max_lora_rank is not None and adapter.rank > self.max_lora_rank:
            raise LoRAError(f"adapter {name!r} has rank {adapter.rank} > max_lora_rank {self.max_lora_rank}")
        if self.allowed_modules is not None and not adapter.target_modules <= self.allowed_modules:
            extra = sorted(adapter.target_modules - self.allowed_modules)
            raise LoRAError(f"adapter {name!r} targets {extra}, not in lora_target_modules")
        return adapter

    def register(self, adapter: LoRAAdapter, pinned: bool = False) -> None:
        with self.lock:
            if adapter.name in self.adapters:
                raise LoRAError(f"an adapter named {adapter.name!r} is already loaded; unload it or use a new version")
            if self.max_loaded_loras is not None and len(self.adapters) >= self.max_loaded_loras:
                raise LoRAError(f"max_loaded_loras ({self.max_loaded_loras}) adapters are loaded; unload one first")
            if pinned:
                self._check_pinned_room()
            adapter.pinned = pinned
            adapter.cache_key = f"{adapter.name}#{next(_load_ids)}"
            self.adapters[adapter.name] = adapter

    def _check_pinned_room(self) -> None:
        """SGLang's rule: pinned adapters may hold at most max_loras_per_batch - 1 slots, so that
        unpinned adapters (and the requests that wait for them) always get a turn."""
        limit = self.pool.num_slots - 1
        pinned = sum(1 for a in self.adapters.values() if a.pinned and not a.unloading)
        if pinned >= limit:
            raise LoRAError(
                f"{pinned} adapters are pinned and max_loras_per_batch is {self.pool.num_slots}: at most "
                f"{limit} may be pinned; unload a pinned adapter, load this one unpinned, or raise max_loras_per_batch"
            )

    @property
    def host_bytes(self) -> int:
        """Bytes of every loaded adapter's host copy (the CPU tensors read from disk)."""
        return sum(a.nbytes for a in list(self.adapters.values()))

    def device_pool_bytes(self, rank: int | None = None) -> int:
        """What a stacked device pool of these slots holds at `rank` (default: the largest loaded)
        over the modules the loaded adapters target (or lora_target_modules when set)."""
        adapters = list(self.adapters.values())
        r = rank if rank is not None else max((a.rank for a in adapters), default=0)
        modules = self.allowed_modules or frozenset().union(*(a.target_modules for a in adapters))
        return pool_bytes(self.shape, self.pool.num_slots, r, modules, self.pool.dtype.itemsize)

    def get(self, name: str) -> LoRAAdapter:
        """The adapter a new request may use; LoRAError if unknown or being unloaded."""
        adapter = self.adapters.get(name)
        if adapter is None or adapter.unloading:
            known = ", ".join(sorted(n for n, a in self.adapters.items() if not a.unloading)) or "none"
            raise LoRAError(f"unknown adapter {name!r} (loaded: {known})")
        return adapter

    def mark_unloading(self, name: str) -> LoRAAdapter:
        with self.lock:
            adapter = self.get(name)
            adapter.unloading = True
            return adapter

    def remove_if_idle(self, adapter: LoRAAdapter) -> bool:
        """Drops an unloading adapter once no request uses it; True when gone."""
        if adapter.num_requests > 0:
            return False
        with self.lock:
            self.pool.evict(adapter)
            if self.adapters.get(adapter.name) is adapter:
                del self.adapters[adapter.name]
        return True
