"""`macaron adapters eval`: does each adapter do its specialist's job better than the bare base?

On held-out prompts (the routing data's `dev` split, never used for training) every specialist
is measured three ways, all greedy and *unconstrained*:

- `base_bare`: the base model without the profile prompt (the tools are still offered to agent);
- `base_profile`: the base with the specialist's profile prompt, as served without an adapter;
- `adapter`: the adapter with the profile prompt, as the specialist serves it.

The figure is the share of answers with the task's property (`tasks.py`: a fenced code block
for code, a well-formed call of an offered tool for agent (a finished prose answer for the prompts
asked with no tools, `--without-tools`), valid A2UI for ui, a finished prose answer for chat). All requests of all arms run as one batch on the engine.

With `served`, each request is made as the specialist serves it by default (ui: constrained to its
bounded A2UI grammar, strays pruned before the check) instead of unconstrained.

Several versions of one adapter are compared in the same run by passing them all
(`{"ui": v1_dir, "ui@v2": v2_dir}`): each version is one more arm, `adapter@v2`, on the same prompts.
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
    base_arms: bool = True,
    served: bool = False,
) -> dict[str, dict[str, ArmScore]]:
    """{specialist: {arm: score}} for every task whose adapter is given (arms: ARMS, then `adapter@VERSION`
    for every other version of it in `adapters`)."""
    engine = open_engine(model_dir, adapters)
    jobs: list[tuple[str, str, list[dict[str, Any]] | None]] = []
    plans: list[Plan] = []
    lora: list[str | None] = []
    limits: list[int] = []
    arms_of = {task.name: _arms(task.name, adapters, base_arms) for task in tasks}
    for task in tasks:
        for index, (text, _) in enumerate(sample_prompts(task.name, per_specialist, split="dev", seed=seed)):
            tools = task.tools(text, seed=10_000 + index)
            for arm, adapter in arms_of[task.name].items():
                plan, limit = task.student(text, tools, with_profile=arm != "base_bare"), MAX_NEW_TOKENS[task.name]
                if served:
                    plan, limit = task.served(plan)
                plans.append(plan)
                lora.append(adapter)
                limits.append(limit)
                jobs.append((task.name, arm, tools))
    answers = generate_all(engine, plans, limits, adapter=lora, desc="evaluating", progress=progress)
    by_name = {task.name: task for task in tasks}
    tallies: dict[str, dict[str, list[int]]] = {t.name: {arm: [0, 0, 0] for arm in arms_of[t.name]} for t in tasks}
    for (name, arm, tools), answer in zip(jobs, answers):
        tally = tallies[name][arm]
        ok = answer.finish_type == "stop" and by_name[name].good(answer.text, tools, served=served)
        tally[0] += int(ok)
        tally[1] += 1
        tally[2] += answer.completion_tokens
    return {
        name: {arm: ArmScore(g, n, round(tok / max(n, 1), 1)) for arm, (g, n, tok) in arms.items()}
        for name, arms in tallies.items()
    }


def _arms(name: str, adapters: dict[str, str], base_arms: bool = True) -> dict[str, str | None]:
    """{arm: engine adapter name} of one specialist: the base arms, `adapter`, then `adapter@VERSION`s."""
    arms: dict[str, str | None] = {"base_bare": None, "base_profile": None} if base_arms else {}
    if name in adapters:
        arms["adapter"] = name
    for key in sorted(adapters):
        if key.partition("@")[0] == name and "@" in key:
            arms[f"adapter@{key.partition('@')[2]}"] = key
    return arms


def summary(scores: dict[str, dict[str, ArmScore]]) -> dict[str, Any]:
    """The JSON figures: `<name>_<arm>` shares and the adapter's gain over the bare base."""
    out: dict[str, Any] = {}
    for name, arms in scores.items():
        for arm, score in arms.items():
            out[f"{name}_{arm}"] = round(score.share, 3)
        for arm, score in arms.items():
            if arm.startswith("adapter") and "base_bare" in arms:
                out[f"{name}_{arm}_gain"] = round(score.share - arms["base_bare"].share, 3)
        out[f"{name}_n"] = next(iter(arms.values())).total
    return out


PROPERTY = {
    "chat": "finished prose answer",
    "agent": "call of an offered tool (none: prose)",
    "code": "fenced code block",
    "ui": "valid A2UI v0.9 (SDK, basic catalog)",
}


def table(scores: dict[str, dict[str, ArmScore]]) -> str:
    extra = sorted({arm for arms in scores.values() for arm in arms if arm.startswith("adapter@")})
    present = {arm for arms in scores.values() for arm in arms}
    columns = [a for a in ARMS if a in present] + extra
    head = " ".join(f"{c.replace('base_profile', 'base+profile').replace('_', ' '):>13}" for c in columns)
    rows = [f"{'specialist':<10} {'property':<38} {head} {'n':>4}"]
    for name, arms in scores.items():
        cells = " ".join(f"{arms[c].share:>13.2f}" if c in arms else f"{'-':>13}" for c in columns)
        total = next(iter(arms.values())).total
        rows.append(f"{name:<10} {PROPERTY.get(name, ''):<38} {cells} {total:>4}")
    return "\n".join(rows)
