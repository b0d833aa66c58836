"""`macaron adapters distill`: each specialist's training set, answered by the base as teacher.

Prompts are the routing data's `train` split for the specialist's label (deduplicated, at most
`max_prompt_chars` long, a seeded sample); the teacher's answers come from one batch job on the
engine; answers that fail the task's check (cut off, invalid) are dropped. The output is one
JSONL per specialist plus `provenance.json` (base, prompts' sources and licenses, counts, hashes).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from macaron.training.batch import generate_all, open_engine
from macaron.training.examples import TrainingExample, write_examples
from macaron.training.lora_train import base_label
from macaron.training.tasks import MAX_NEW_TOKENS, SpecialistTask


def sample_prompts(label: str, count: int, split: str = "train", seed: int = 0, max_prompt_chars: int = 600) -> list[tuple[str, str]]:
    """(text, source) pairs of one label from the routing data, deduplicated, seeded."""
    from macaron.router.classifier.data import load_split

    seen: set[str] = set()
    rows: list[tuple[str, str]] = []
    for example in load_split(split):
        text = (example.text or "").strip()
        if example.label != label or not text or len(text) > max_prompt_chars or text in seen:
            continue
        seen.add(text)
        rows.append((text, example.source))
    random.Random(f"{seed}:{label}:{split}").shuffle(rows)
    return rows[:count]


def distill(
    model_dir: str,
    tasks: list[SpecialistTask],
    out_dir: Path,
    per_specialist: int,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Writes `<out_dir>/<name>.jsonl` per task and `provenance.json`; returns the provenance."""
    engine = open_engine(model_dir)
    provenance: dict[str, Any] = {"base": base_label(Path(model_dir)), "seed": seed, "specialists": {}}
    for task in tasks:
        prompts = sample_prompts(task.name, per_specialist, seed=seed)
        tools = [task.tools(text, seed=index) for index, (text, _) in enumerate(prompts)]
        plans = [task.teacher(text, t) for (text, _), t in zip(prompts, tools)]
        answers = generate_all(engine, plans, MAX_NEW_TOKENS[task.name], desc=f"teacher {task.name}", progress=progress)
        examples = []
        for (text, source), t, plan, answer in zip(prompts, tools, plans, answers):
            try:
                target = task.target(plan, answer.text, answer.finish_type)
            except ValueError:
                target = None
            if target is not None:
                student = task.student(text, t)
                examples.append(TrainingExample(messages=student.messages, target=target, tools=t, source=source))
        digest = write_examples(out_dir / f"{task.name}.jsonl", examples)
        provenance["specialists"][task.name] = {
            "prompts": len(prompts),
            "kept": len(examples),
            "generated_tokens": sum(a.completion_tokens for a in answers),
            "sources": sorted({source for _, source in prompts}),
            "sha256": digest,
        }
    (out_dir / "provenance.json").write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    return provenance
