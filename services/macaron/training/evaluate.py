"""`macaron adapters eval`: does each adapter do its specialist's job better than the bare base?

On held-out prompts (the routing data's `dev` split, never used for training) every specialist
is measured three ways, all greedy and *unconstrained*:

- `base_bare`: the base model without the profile prompt (the tools are still offered to agent);
- `base_profile`: the base with the specialist's profile prompt, as served without an adapter;
- `adapter`: the adapter with the profile prompt, as the specialist serves it.

The figure is the share of answers with the task's property (`tasks.py`: a fenced code block
for code, a well-formed call of an offered tool for agent, a schema-valid UI for ui, a finished
prose answer for chat). All requests of all arms run as one batch on the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from macaron.training.batch import generate_all, open_engine
from macaron.training.distill import sample_prompts
from macaron.training.tasks import MAX_NEW_TOKENS, Plan, SpecialistTask

ARMS = ("base_bare", "base_profile", "adapter")


@dataclass(frozen=True)
class ArmScore:
    good: int
    total: int
    mean_tokens: float

    @property
    def share(self) -> float:
        return self.good / self.total if self.total else 0.0


def evaluate(
    model_dir: str,
    adapters: dict[str, str],
    tasks: list[SpecialistTask],
    per_specialist: int = 24,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, dict[str, ArmScore]]:
    """{specialist: {arm: score}} for every task whose adapter is given."""
    engine = open_engine(model_dir, adapters)
    jobs: list[tuple[str, str, list[dict[str, Any]] | None]] = []
    plans: list[Plan] = []
    lora: list[str | None] = []
    limits: list[int] = []
    for task in tasks:
        for index, (text, _) in enumerate(sample_prompts(task.name, per_specialist, split="dev", seed=seed)):
            tools = task.tools(text, seed=10_000 + index)
            for arm in ARMS:
                plans.append(task.student(text, tools, with_profile=arm != "base_bare"))
                lora.append(task.name if arm == "adapter" else None)
                limits.append(MAX_NEW_TOKENS[task.name])
                jobs.append((task.name, arm, tools))
    answers = generate_all(engine, plans, limits, adapter=lora, desc="evaluating", progress=progress)
    by_name = {task.name: task for task in tasks}
    tallies: dict[str, dict[str, list[int]]] = {t.name: {arm: [0, 0, 0] for arm in ARMS} for t in tasks}
    for (name, arm, tools), answer in zip(jobs, answers):
        tally = tallies[name][arm]
        ok = answer.finish_type == "stop" and by_name[name].good(answer.text, tools)
        tally[0] += int(ok)
        tally[1] += 1
        tally[2] += answer.completion_tokens
    return {
        name: {arm: ArmScore(g, n, round(tok / max(n, 1), 1)) for arm, (g, n, tok) in arms.items()}
        for name, arms in tallies.items()
    }


def summary(scores: dict[str, dict[str, ArmScore]]) -> dict[str, Any]:
    """The JSON figures: `<name>_<arm>` shares and the adapter's gain over the bare base."""
    out: dict[str, Any] = {}
    for name, arms in scores.items():
        for arm, score in arms.items():
            out[f"{name}_{arm}"] = round(score.share, 3)
        out[f"{name}_adapter_gain"] = round(arms["adapter"].share - arms["base_bare"].share, 3)
        out[f"{name}_n"] = arms["adapter"].total
    return out


PROPERTY = {
    "chat": "finished prose answer",
    "agent": "well-formed call of an offered tool",
    "code": "fenced code block",
    "ui": "valid against the UI schema",
}


def table(scores: dict[str, dict[str, ArmScore]]) -> str:
    rows = [f"{'specialist':<10} {'property':<38} {'base bare':>10} {'base+profile':>13} {'adapter':>9} {'n':>4}"]
    for name, arms in scores.items():
        cells = " ".join(f"{arms[arm].share:>{w}.2f}" for arm, w in zip(ARMS, (10, 13, 9)))
        rows.append(f"{name:<10} {PROPERTY.get(name, ''):<38} {cells} {arms['adapter'].total:>4}")
    return "\n".join(rows)
