"""Prune what a small model adds beyond its interface, before the SDK judges the answer.

The 135 M `ui` adapter writes a good surface and then, not knowing when to stop, keeps adding
components until the grammar's bound: repeats of an id, components nothing refers to. A renderer
would reject the whole surface for one stray component, so the answer is pruned first, as a
renderer-side tree walk would see it, and only then validated with the SDK (`validate.py`):

1. a repeated id keeps its first component;
2. a child list drops ids that name no component; a component whose single `child` names none
   is dropped (with the ids pointing to it), until nothing changes;
3. components the root does not reach are dropped.

Nothing is invented and nothing reachable is changed, so a valid answer passes through
untouched; what is still wrong after pruning (no root, an unknown component, a bad property) is
the SDK's to reject, and so is an answer of which nothing but a bare root would remain.
"""

from __future__ import annotations

import copy
from typing import Any

ROOT_ID = "root"


def prune_components(messages: list[Any]) -> list[Any]:
    """A copy of `messages` whose updateComponents lists hold only the tree under the root."""
    out = copy.deepcopy(messages)
    for message in out:
        body = message.get("updateComponents") if isinstance(message, dict) else None
        if isinstance(body, dict) and isinstance(body.get("components"), list):
            body["components"] = _prune(body["components"])
    return out


def _prune(components: list[Any]) -> list[Any]:
    if not all(isinstance(c, dict) and isinstance(c.get("id"), str) for c in components):
        return components  # not ours to fix: the SDK names the problem
    by_id: dict[str, dict[str, Any]] = {}
    for component in components:
        by_id.setdefault(component["id"], component)
    if ROOT_ID not in by_id:
        return components
    changed = True
    while changed:
        changed = False
        for node_id, component in list(by_id.items()):
            children = component.get("children")
            if isinstance(children, list) and any(c not in by_id for c in children):
                component["children"] = [c for c in children if c in by_id]
                changed = True
            child = component.get("child")
            if isinstance(child, str) and child not in by_id and node_id != ROOT_ID:
                del by_id[node_id]
                changed = True
    reachable: set[str] = set()
    stack = [ROOT_ID]
    while stack:
        node_id = stack.pop()
        if node_id in reachable or node_id not in by_id:
            continue
        reachable.add(node_id)
        component = by_id[node_id]
        refs = list(component.get("children") or []) if isinstance(component.get("children"), list) else []
        if isinstance(component.get("child"), str):
            refs.append(component["child"])
        stack.extend(r for r in refs if isinstance(r, str))
    kept = [c for i, c in by_id.items() if i in reachable]
    return kept if len(kept) > 1 else components  # nothing but a bare root: the SDK judges the original
