"""LLMEngine: the synchronous engine core. `step()` is schedule, run, sample, postprocess.

Single-threaded by design: tests and the benchmark drive it directly; AsyncLLMEngine runs it
in one background thread and talks to it through an inbox.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from macaron.engine.args import EngineArgs
from macaron.engine.block_manager import BlockManager
from macaron.engine.input_processor import InputProcessor
from macaron.engine.lora_manager import LoRAAdapter, LoRAError, LoRAManager
from macaron.engine.model_runner import ModelRunner
from macaron.engine.output_processor import append_token, finalize, make_output, should_emit
from macaron.engine.protocol import EngineStats, GenerateRequest, InvalidRequestError, MemoryUsage, RequestOutput
from macaron.engine.sampler import Sampler
from macaron.engine.scheduler import Scheduler
from macaron.engine.sequence import Sequence
from macaron.kv_events.publisher import ZmqEventPublisher
from macaron.kv_events.wire import AllBlocksCleared, KVEventBatch, KVEventsConfig

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Counters:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    cached_tokens: int = 0
    finished: int = 0
    aborted: int = 0
    steps: int = 0


class LLMEngine:
    """Holds the model, KV cache, adapters and queues; one `step()` advances every running request."""

    def __init__(self, args: EngineArgs) -> None:
        from transformers import AutoTokenizer

        self.args = args
        model_dir = Path(args.model_path) if args.model_path else None
        lora_paths = list(args.lora_paths)
        if model_dir is None:
            from macaron.assets.builtin import ensure_builtin_model

            assets = ensure_builtin_model(args.builtin_model)
            model_dir = Path(assets.model_dir)
            if not lora_paths:
                lora_paths = [f"{name}={path}" for name, path in assets.adapters.items()]
        self.model_dir = model_dir
        self.device = resolve_device(args.device)
        if self.device.type == "cpu":
            torch.set_num_threads(args.num_threads or max(1, (os.cpu_count() or 2) - 1))
        self.dtype = _resolve_dtype(args.dtype, model_dir, self.device)
        num_blocks = max(1, args.max_total_tokens // args.kv_block_size)
        self.runner = ModelRunner(
            model_dir, dtype=self.dtype, device=self.device, num_blocks=num_blocks, block_size=args.kv_block_size,
            contiguous_kv_tokens=args.decode_kv_copy_tokens, pack_weights=args.cpu_weight_packing,
            cascade_attention=args.cascade_attention,
        )
        shape = self.runner.shape
        self.vocab_size = shape.vocab_size
        self.context_length = args.context_length or shape.max_position_embeddings
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.eos_token_ids = _eos_ids(model_dir, self.tokenizer)
        self.kv_events = _kv_event_publisher(args.kv_events_config)
        self.block_manager = BlockManager(num_blocks, args.kv_block_size, events=self.kv_events is not None)
        if self.kv_events is not None:  # a (re)started engine holds nothing: subscribers drop what they knew
            self.kv_events.publish(KVEventBatch(time.time(), [AllBlocksCleared()]))
        self.lora = LoRAManager(
            shape,
            dtype=self.dtype,
            device=self.device,
            max_loras_per_batch=args.max_loras_per_batch,
            max_loaded_loras=args.max_loaded_loras,
            max_lora_rank=args.max_lora_rank,
            target_modules=args.lora_target_modules,
        )
        self.scheduler = Scheduler(
            self.block_manager,
            self.lora.pool,
            max_running_requests=args.max_running_requests,
            chunked_prefill_size=args.chunked_prefill_size,
            on_release=self.runner.release,
        )
        self.sampler = Sampler(self.vocab_size, self.eos_token_ids)
        self.inputs = InputProcessor(
            self.tokenizer,
            vocab_size=self.vocab_size,
            context_length=self.context_length,
            max_total_tokens=num_blocks * args.kv_block_size,
            max_new_tokens_limit=args.max_new_tokens_limit,
            eos_token_ids=self.eos_token_ids,
            lora_manager=self.lora,
            random_seed=args.random_seed,
            device=self.device,
        )
        self.requests: dict[str, Sequence] = {}
        self.counters = Counters()
        self.pending_unloads: list[LoRAAdapter] = []
        self.last_step_idle = False
        """True when the last step() found nothing it could run (the caller should wait, not spin)."""
        for spec in lora_paths:
            name, sep, path = spec.partition("=")
            if not sep or not name or not path:
                raise ValueError(f"lora_paths entries are NAME=PATH, got {spec!r}")
            self.load_adapter(name, path)

    @classmethod
    def from_args(cls, args: EngineArgs) -> "LLMEngine":
        return cls(args)

    # --- requests --------------------------------------------------------------------------
    def add_request(self, request: GenerateRequest | Sequence) -> Sequence:
        """Validates (unless given a prepared Sequence) and queues a request."""
        seq = request if isinstance(request, Sequence) else self.inputs.process(request)
        if seq.rid in self.requests:
            raise InvalidRequestError(f"a request with rid {seq.rid!r} is already running")
        if seq.adapter is not None:
            if self.lora.adapters.get(seq.adapter.name) is not seq.adapter:
                raise InvalidRequestError(f"adapter {seq.adapter.name!r} was unloaded")
            seq.adapter.num_requests += 1
        self.requests[seq.rid] = seq
        self.counters.prompt_tokens += seq.num_prompt_tokens
        self.scheduler.add(seq)
        return seq

    def abort(self, rid: str, message: str = "aborted by the client") -> RequestOutput | None:
        """Stops a queued or running request and frees its row and cache references at once."""
        seq = self.requests.get(rid)
        if seq is None:
            return None
        self.counters.aborted += 1
        return self._finish(seq, {"type": "abort", "message": message}, text=seq.detokenizer.text, aborted=True)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        """One engine step; returns the outputs to deliver (streaming chunks and finished requests)."""
        step = self.scheduler.schedule()
        self.last_step_idle = not step
        if not step:
            return []
        logits = self.runner.run(step, self.lora.pool)
        sampled = step.sampled
        tokens = self.sampler(logits, sampled) if sampled else []
        for seq, n in step.prefill:
            prev = seq.num_computed_tokens
            seq.num_computed_tokens += n
            self.block_manager.register_computed(seq, prev)
        for seq in step.decode:
            prev = seq.num_computed_tokens
            seq.num_computed_tokens += 1
            self.block_manager.register_computed(seq, prev)
        outputs: list[RequestOutput] = []
        for seq, token in zip(sampled, tokens):
            self.counters.generation_tokens += 1
            reason = append_token(seq, token, self.eos_token_ids, self.context_length)
            if reason is not None:
                outputs.append(self._finish(seq, reason))
            elif should_emit(seq):
                outputs.append(make_output(seq))
        self.counters.steps += 1
        if self.kv_events is not None:
            events = self.block_manager.take_events()
            if events:
                self.kv_events.publish(KVEventBatch(time.time(), events))
        return outputs

    def close(self) -> None:
        """Stops the KV-event publisher (the engine itself holds nothing else to release)."""
        if self.kv_events is not None:
            self.kv_events.close()
            self.kv_events = None

    def _finish(
        self, seq: Sequence, reason: dict[str, Any], text: str | None = None, aborted: bool = False
    ) -> RequestOutput:
        final_text = finalize(seq, reason) if text is None else text
        seq.finish_reason = reason
        self.scheduler.finish(seq)
        del self.requests[seq.rid]
        if seq.adapter is not None:
            seq.adapter.num_requests -= 1
        if not aborted:
            self.counters.finished += 1
        self.counters.cached_tokens += seq.num_cached_tokens
        return make_output(seq, final_text)

    # --- adapters --------------------------------------------------------------------------
    def load_adapter(self, name: str, path: str, pinned: bool = False) -> LoRAAdapter:
        """Reads and registers a PEFT adapter under `name`; InvalidRequestError if it cannot."""
        try:
            adapter = self.lora.read(name, path)
            self.lora.register(adapter, pinned=pinned)
        except (LoRAError, OSError, ValueError) as exc:
            raise InvalidRequestError(str(exc)) from exc
        return adapter

    def unload_adapter(self, name: str) -> bool:
        """Stops new requests from using `name`; True when it is gone now, else after its requests finish."""
        try:
            adapter = self.lora.mark_unloading(name)
        except LoRAError as exc:
            raise InvalidRequestError(str(exc)) from exc
        if self.lora.remove_if_idle(adapter):
            return True
        self.pending_unloads.append(adapter)
        return False

    def finish_unloads(self) -> list[str]:
        """Names of unloading adapters that just became unused and were dropped."""
        done = [a for a in self.pending_unloads if self.lora.remove_if_idle(a)]
        self.pending_unloads = [a for a in self.pending_unloads if a not in done]
        return [a.name for a in done]

    # --- introspection ---------------------------------------------------------------------
    def memory_usage(self) -> MemoryUsage:
        """Every resident byte by kind; on CPU the slot pool is empty because slots read the host copies."""
        adapters = {name: a.nbytes for name, a in list(self.lora.adapters.items())}
        return MemoryUsage(
            base_weight_bytes=self.runner.weight_bytes,
            packed_head_copy_bytes=self.runner.packed_head_copy_bytes,
            adapter_bytes=adapters,
            kv_cache_bytes=self.runner.kv_cache_bytes,
            kv_copy_bytes=self.runner.contiguous_kv_bytes,
            kv_copy_max_bytes=self.runner.contiguous.max_bytes,
            adapter_host_bytes=sum(adapters.values()),
            adapter_pool_bytes=self.lora.pool.nbytes,
            adapter_pool_bytes_on_accelerator=self.lora.device_pool_bytes(),
            adapter_slots=self.lora.pool.num_slots,
            device=str(self.device),
        )

    def stats(self) -> EngineStats:
        c = self.counters
        return EngineStats(
            num_running=len(self.scheduler.running),
            num_queued=len(self.scheduler.waiting),
            kv_blocks_used=len(self.block_manager.used_block_ids),
            kv_blocks_total=self.block_manager.num_blocks,
            prompt_tokens_total=c.prompt_tokens,
            generation_tokens_total=c.generation_tokens,
            cached_tokens_total=c.cached_tokens,
            requests_finished_total=c.finished,
            requests_aborted_total=c.aborted,
        )

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": str(self.model_dir),
            "served_model_name": self.args.served_model_name or self.model_dir.name,
            "tokenizer_path": str(self.model_dir),
            "is_generation": True,
            "architecture": self.runner.shape.architecture,
            "context_length": self.context_length,
            "vocab_size": self.vocab_size,
            "max_total_tokens": self.block_manager.num_blocks * self.block_manager.block_size,
            "dtype": str(self.dtype).removeprefix("torch."),
        }


SUPPORTED_DEVICE_TYPES = ("cpu", "cuda")


def _kv_event_publisher(config_json: str | None) -> ZmqEventPublisher | None:
    """The publisher `--kv-events-config` asks for (None when empty or publisher "null")."""
    if not config_json:
        return None
    try:
        config = KVEventsConfig.from_cli(config_json)
    except ValueError as exc:
        raise ValueError(f"kv_events_config is not valid JSON of SGLang's KV-events config: {exc}") from exc
    if config.publisher == "null":
        return None
    if config.publisher != "zmq":
        raise ValueError(f"kv_events_config: unknown publisher {config.publisher!r}; use 'zmq' or 'null'")
    return ZmqEventPublisher(config)


def resolve_device(name: str) -> torch.device:
    """The engine's torch device, or a ValueError that says what to do instead."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"device {name!r} is not a torch device ({exc}); use cpu or cuda[:N]") from exc
    if device.type not in SUPPORTED_DEVICE_TYPES:
        raise ValueError(
            f"device {name!r}: the embedded engine runs on {' or '.join(SUPPORTED_DEVICE_TYPES)} only; "
            f"serve other accelerators with SGLang"
        )
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            raise ValueError(
                f"device {name!r}: torch ({torch.__version__}, {build}) sees no CUDA device; "
                f"set device to cpu, or install a CUDA build of torch on a machine with a GPU"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    return device


def _resolve_dtype(name: str, model_dir: Path, device: torch.device) -> torch.dtype:
    if name != "auto":
        return _DTYPES[name]
    if device.type == "cpu":
        return torch.float32
    cfg = json.loads((model_dir / "config.json").read_text())
    return _DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32"), torch.float32)


def _eos_ids(model_dir: Path, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for file in ("generation_config.json", "config.json"):
        path = model_dir / file
        if path.is_file():
            value = json.loads(path.read_text()).get("eos_token_id")
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, list):
                ids.update(int(v) for v in value)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
