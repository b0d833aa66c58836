"""`macaron adapters train`: a PEFT LoRA on CPU, reproducibly, for any base the engine loads.

Each example is rendered with the base's own chat template (the prompt the specialist sends),
followed by the target and the template's end-of-turn token; the loss counts only the target
tokens. The logits are computed only at those positions (the 49 k-row head of a small model
otherwise costs as much as its layers). Seeds fix the data order and LoRA init, and one torch
thread pool size is set, so a run on one machine gives the same adapter twice.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from macaron.training.examples import TrainingExample, file_sha256, read_examples

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class TrainConfig:
    """Every knob of one training run (recorded in the adapter's card)."""

    rank: int = 8
    alpha: int = 16
    target_modules: tuple[str, ...] = DEFAULT_TARGETS
    steps: int = 120
    batch_size: int = 4
    learning_rate: float = 1e-3
    warmup_steps: int = 10
    weight_decay: float = 0.0
    max_length: int = 768
    seed: int = 0
    num_threads: int | None = None
    save_dtype: str = "bfloat16"


@dataclass
class TrainResult:
    out_dir: str
    examples: int
    steps: int
    train_tokens: int
    target_tokens: int
    first_loss: float
    final_loss: float
    seconds: float
    adapter_bytes: int
    data_sha256: str
    config: dict[str, Any] = field(default_factory=dict)


def encode(tokenizer: Any, example: TrainingExample, max_length: int) -> tuple[list[int], int] | None:
    """(token ids, index where the target starts), or None when the prompt alone is too long."""
    prompt = tokenizer.apply_chat_template(
        example.messages, tools=example.tools, tokenize=False, add_generation_prompt=True
    )
    end = _end_of_turn(tokenizer)
    prompt_ids = tokenizer(str(prompt), add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(example.target, add_special_tokens=False)["input_ids"] + [end]
    if len(prompt_ids) >= max_length - 8:
        return None
    ids = (prompt_ids + target_ids)[:max_length]
    return ids, len(prompt_ids)


def _end_of_turn(tokenizer: Any) -> int:
    for token in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id and token_id >= 0:
            return token_id
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no end-of-turn or eos token to end targets with")
    return int(tokenizer.eos_token_id)


def train_adapter(
    base_dir: str | Path,
    data_path: str | Path,
    out_dir: str | Path,
    config: TrainConfig = TrainConfig(),
    name: str = "adapter",
    progress: bool = True,
) -> TrainResult:
    """Trains one LoRA on `data_path` and writes a PEFT directory with a card to `out_dir`."""
    examples = read_examples(data_path)  # bad data fails before the heavy imports
    data_sha256 = file_sha256(data_path)
    import torch
    from peft import LoraConfig, get_peft_model
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    base_dir, out_dir = Path(base_dir), Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    encoded = [e for e in (encode(tokenizer, x, config.max_length) for x in examples) if e is not None]
    if not encoded:
        raise ValueError(f"every example of {data_path} is longer than max_length={config.max_length}")
    torch.manual_seed(config.seed)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model.config.use_cache = False
    lora = LoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,
        target_modules=list(config.target_modules),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, lora)
    peft_model.train()
    params = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine(config.warmup_steps, config.steps))
    order = _batches(len(encoded), config.batch_size, config.steps, config.seed)
    losses: list[float] = []
    train_tokens = target_tokens = 0
    with tqdm(total=config.steps, desc=f"training {name}", unit="step", disable=not progress) as bar:
        for batch in order:
            rows = [encoded[i] for i in batch]
            loss, n_tokens, n_targets = _loss(peft_model, rows, tokenizer.pad_token_id or 0)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            train_tokens += n_tokens
            target_tokens += n_targets
            bar.update()
            bar.set_postfix(loss=f"{_mean(losses[-10:]):.3f}")
    out_dir.mkdir(parents=True, exist_ok=True)
    _save(peft_model, out_dir, config.save_dtype)
    result = TrainResult(
        out_dir=str(out_dir),
        examples=len(encoded),
        steps=config.steps,
        train_tokens=train_tokens,
        target_tokens=target_tokens,
        first_loss=round(_mean(losses[:10]), 4),
        final_loss=round(_mean(losses[-10:]), 4),
        seconds=round(time.perf_counter() - started, 1),
        adapter_bytes=sum(p.stat().st_size for p in out_dir.glob("*.safetensors")),
        data_sha256=data_sha256,
        config={**asdict(config), "target_modules": list(config.target_modules)},
    )
    write_card(out_dir, name, base_dir, result)
    return result


def _loss(model: Any, rows: list[tuple[list[int], int]], pad_id: int) -> tuple[Any, int, int]:
    """Mean cross-entropy over target tokens; logits only where a target token is predicted."""
    import torch

    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    predict = torch.zeros((len(rows), width), dtype=torch.bool)
    for r, (ids, start) in enumerate(rows):
        input_ids[r, : len(ids)] = torch.tensor(ids)
        mask[r, : len(ids)] = 1
        predict[r, start - 1 : len(ids) - 1] = True  # position t predicts token t+1
    hidden = model.base_model.model.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    labels = input_ids[:, 1:][predict[:, :-1]]
    logits = model.base_model.model.lm_head(hidden[:, :-1][predict[:, :-1]])
    loss = torch.nn.functional.cross_entropy(logits.float(), labels)
    return loss, int(mask.sum()), int(labels.numel())


def _batches(n: int, batch_size: int, steps: int, seed: int) -> list[list[int]]:
    """`steps` batches from seeded shuffles of range(n) (epochs continue across the boundary)."""
    rng = random.Random(seed)
    pool: list[int] = []
    out: list[list[int]] = []
    for _ in range(steps):
        batch = []
        while len(batch) < min(batch_size, n):
            if not pool:
                pool = list(range(n))
                rng.shuffle(pool)
            batch.append(pool.pop())
        out.append(batch)
    return out


def _warmup_cosine(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def _mean(values: list[float]) -> float:
    return sum(values) / max(1, len(values))


def _save(peft_model: Any, out_dir: Path, save_dtype: str) -> None:
    """PEFT's files, weights cast to `save_dtype`, config with sorted targets (reproducible bytes)."""
    import torch
    from safetensors.torch import save_file

    peft_model.save_pretrained(str(out_dir))
    weights = out_dir / "adapter_model.safetensors"
    from safetensors.torch import load_file

    state = {k: v.to(getattr(torch, save_dtype)).contiguous() for k, v in load_file(str(weights)).items()}
    save_file(state, str(weights), metadata={"format": "pt"})
    config_path = out_dir / "adapter_config.json"
    config = json.loads(config_path.read_text())
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    config["base_model_name_or_path"] = base_label(Path(config.get("base_model_name_or_path") or "base"))
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for path in out_dir.iterdir():
        path.chmod(0o644)


def base_label(base_dir: Path) -> str:
    """A base's name without machine paths: the directory, or its parent for a cache's `model/`."""
    return base_dir.parent.name if base_dir.name == "model" and base_dir.parent.name else base_dir.name


def write_card(out_dir: Path, name: str, base_dir: Path, result: TrainResult, evaluation: dict[str, Any] | None = None) -> None:
    """README.md (a short card) and macaron-adapter.json (the same facts, machine-readable)."""
    card = {"name": name, "base": base_label(base_dir), **asdict(result)}
    card.pop("out_dir")
    if evaluation is not None:
        card["evaluation"] = evaluation
    (out_dir / "macaron-adapter.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    lines = [
        f"# `{name}` LoRA adapter",
        "",
        f"Trained by `macaron adapters train` on base `{base_label(base_dir)}`.",
        "",
        "| | |",
        "|---|---|",
        f"| data sha256 | `{result.data_sha256[:16]}…` ({result.examples} examples) |",
        f"| rank / alpha / targets | {result.config['rank']} / {result.config['alpha']} / {', '.join(result.config['target_modules'])} |",
        f"| steps × batch, lr | {result.steps} × {result.config['batch_size']}, {result.config['learning_rate']} |",
        f"| tokens seen (target tokens) | {result.train_tokens} ({result.target_tokens}) |",
        f"| loss first 10 → last 10 steps | {result.first_loss} → {result.final_loss} |",
        f"| time, size | {result.seconds} s, {result.adapter_bytes / 1e6:.1f} MB ({result.config['save_dtype']}) |",
    ]
    if evaluation:
        lines += ["", "Evaluation (`macaron adapters eval`):", "", "```json", json.dumps(evaluation, indent=2), "```"]
    (out_dir / "README.md").write_text("\n".join(lines) + "\n")
