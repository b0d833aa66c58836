"""Throwaway tiny Llama/Qwen2 checkpoints and PEFT adapters, built with transformers + peft.

Random init with a larger spread than usual so greedy argmax has clear margins (the reference
comparison is token for token). The project's tiny model comes from
macaron.assets; these builders make the Qwen2 (q/k/v bias, tied, sharded) variant and adapters
with unusual shapes (rank 16 on q/v only, rsLoRA rank 4 on the MLP). Also: shared test helpers.
"""

from __future__ import annotations

from pathlib import Path

import torch

from macaron.engine import EngineArgs, GenerateRequest, LLMEngine, RequestOutput, SamplingParams

PROMPTS = ["Hello, how are you?", "def fibonacci(n):", '{"name": "macaron", "tags": [', "Écris un poème 日本"]

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b\n",
    '{"name": "macaron", "tags": ["chat", "agent", "code", "ui"], "count": 42}',
    "Hello world! How are you today? I am fine, thank you.",
    "café naïve 日本語 テキスト 😀 emoji ok",
    "SELECT * FROM users WHERE id = 7;",
]


def build_tokenizer(out: Path) -> None:
    """A byte-level BPE (round-trips any UTF-8) saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|bos|>", "<|eos|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>"
    )
    fast.save_pretrained(out)


def build_model(out: Path, arch: str = "llama", seed: int = 0, layers: int = 2, shard: bool = False) -> Path:
    """A tiny causal LM (GQA, fp32, safetensors) in `out`."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    tok = AutoTokenizer.from_pretrained(out)
    common = dict(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        initializer_range=0.25,
    )
    torch.manual_seed(seed)
    if arch == "llama":
        cfg = LlamaConfig(**common, rms_norm_eps=1e-5, tie_word_embeddings=False)
        cfg.rope_parameters = {"rope_theta": 5000.0, "rope_type": "default"}
        model = LlamaForCausalLM(cfg)
    else:
        cfg = Qwen2Config(**common, rms_norm_eps=1e-6, tie_word_embeddings=True)
        model = Qwen2ForCausalLM(cfg)
        with torch.no_grad():  # make the q/k/v biases matter
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True, max_shard_size="100KB" if shard else "5GB")
    return out


def build_adapter(model_dir: Path, out: Path, seed: int, targets: list[str], r: int = 8, rslora: bool = False) -> Path:
    """A PEFT LoRA with non-zero lora_B, so it changes the model's output."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = LoraConfig(r=r, lora_alpha=2 * r, target_modules=targets, lora_dropout=0.0, use_rslora=rslora)
    peft_model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
            elif "lora_A" in name:
                p.normal_(0, 0.3)
    peft_model.save_pretrained(out)
    return out


def make_engine(model_dir: Path, adapters: dict[str, Path], **overrides) -> LLMEngine:
    args = EngineArgs(
        model_path=str(model_dir),
        lora_paths=[f"{name}={path}" for name, path in adapters.items()],
        max_total_tokens=overrides.pop("max_total_tokens", 8192),
        num_threads=overrides.pop("num_threads", 1),
        **overrides,
    )
    return LLMEngine(args)


def greedy(max_new_tokens: int = 16, **kw) -> SamplingParams:
    return SamplingParams(temperature=0, max_new_tokens=max_new_tokens, **kw)


def run_all(eng: LLMEngine, requests: list[GenerateRequest], stagger: int = 0) -> dict[str, RequestOutput]:
    """Runs requests to completion (adding one every `stagger` steps); returns final outputs by rid."""
    pending = list(requests)
    done: dict[str, RequestOutput] = {}
    step = 0
    while pending or eng.has_unfinished():
        if pending and (stagger == 0 or step % stagger == 0):
            batch = pending if stagger == 0 else pending[:1]
            for r in batch:
                eng.add_request(r)
            pending = pending[len(batch) :]
        for out in eng.step():
            if out.finished:
                done[out.rid] = out
        eng.block_manager.check_invariants()
        step += 1
    return done


def logits_and_tokens(eng: LLMEngine, prompts: list[str], adapters: list[str | None]) -> tuple[list[torch.Tensor], dict]:
    """Every sampled row's logits (the sampler's input, step by step) and the greedy tokens of one batch,
    prompt i with adapter i: what two engine configurations are compared on."""
    seen: list[torch.Tensor] = []
    sample = eng.sampler

    class Recording:
        def __call__(self, logits, seqs):
            seen.append(logits.clone())
            return sample(logits, seqs)

    eng.sampler = Recording()
    try:
        reqs = [
            GenerateRequest(rid=f"r{i}", prompt=eng.tokenizer.encode(p, add_special_tokens=False), sampling=greedy(8),
                            lora_path=a)
            for i, (p, a) in enumerate(zip(prompts, adapters))
        ]
        outs = run_all(eng, reqs)
    finally:
        eng.sampler = sample
    return seen, {rid: o.output_ids for rid, o in outs.items()}


class HFReference:
    """Greedy tokens from transformers + peft on the same files (the ground truth)."""

    def __init__(self, model_dir: Path, adapters: dict[str, Path]) -> None:
        from transformers import AutoTokenizer

        self.model_dir = model_dir
        self.adapters = adapters
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self._models: dict[str | None, object] = {}

    def model(self, adapter: str | None):
        if adapter not in self._models:
            from peft import PeftModel
            from transformers import AutoModelForCausalLM

            m = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
            if adapter is not None:
                m = PeftModel.from_pretrained(m, str(self.adapters[adapter]))
            self._models[adapter] = m.eval()
        return self._models[adapter]

    def greedy(self, adapter: str | None, prompt: str, max_new_tokens: int = 16) -> list[int]:
        """Greedy output ids up to and including the first EOS (as the engine reports them)."""
        model = self.model(adapter)
        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=self.tokenizer.pad_token_id or 0,
            )
        tokens = out[0, ids.shape[1] :].tolist()
        eos = model.generation_config.eos_token_id
        eos = {eos} if isinstance(eos, int) else set(eos or [])
        for i, t in enumerate(tokens):
            if t in eos:
                return tokens[: i + 1]
        return tokens
