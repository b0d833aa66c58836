"""A written check of the two conversation cases the data sources rarely show: vague follow-ups and short switches.

Why: the public conversations hold few turns like "what do you mean?" after a real answer, and few short new
requests for another specialist ("set an alarm for 7am" in a `code` session). Both moved with retrains (classifier
README, "Z", "G3"), and a check written in a scratch folder was lost with it. This one lives with the routing data:

- 8 openings, two per specialist, each with a real answer from that specialist;
- `stay`: each opening followed by each of 20 vague follow-ups, labelled with the opening's specialist (160);
- `switch`: 24 short requests, six per specialist, each after one opening of every other specialist (72).

    python -m macaron.router.classifier.followup_panel     # rewrites routing_data/followup_panel.jsonl
    macaron router eval --data routing_data/followup_panel.jsonl   # stay / switch accuracy

Written for this project (no source to cite); never read by training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from macaron.router.classifier.data import find_data_dir

FILE_NAME = "followup_panel.jsonl"
SOURCE = "macaron-serve:followup_panel"
LICENSE = "Apache-2.0 (written for this project)"

# (specialist, user request, the specialist's answer)
OPENINGS: tuple[tuple[str, str, str], ...] = (
    ("code", "How do I reverse a list in Python?",
     "Use slicing: `items[::-1]` returns a reversed copy, and `items.reverse()` reverses the list in place. "
     "To walk it backwards without a copy, loop over `reversed(items)`."),
    ("code", "My Flask app returns a 500 error when I post JSON to it. Why?",
     "Most often the handler reads `request.form` instead of `request.get_json()`, or the client leaves out the "
     "`Content-Type: application/json` header. The traceback in the server log names the failing line."),
    ("agent", "Book me a table for two at an Italian place near the office on Friday at 7pm.",
     "I found two options near your office: Trattoria Roma at 7:00 pm (4.6 stars) and Pasta Bar at 7:15 pm "
     "(4.4 stars). Shall I reserve Trattoria Roma?"),
    ("agent", "Remind me to renew my passport next month.",
     "Done: a reminder titled 'Renew passport' is set for the 3rd of next month at 9:00 am."),
    ("ui", "Build a signup form with email, password and a terms checkbox.",
     "Here is the form: an email field with validation, a password field with a strength meter, a terms "
     "checkbox, and a Sign up button that stays disabled until every field is valid."),
    ("ui", "Make a dashboard card that shows weekly sales as a bar chart.",
     "Here is the card: the title 'Weekly sales', a bar chart of the last seven days with a tooltip on each bar, "
     "and the week's total in the top right corner."),
    ("chat", "Why is the sky blue?",
     "Sunlight scatters off the molecules of the air, and short blue wavelengths scatter far more than red ones "
     "(Rayleigh scattering), so blue light reaches your eyes from every part of the sky."),
    ("chat", "Can you suggest a good book for a long flight?",
     "Try 'Project Hail Mary' by Andy Weir: fast, funny, and easy to pick up again after a nap."),
)

VAGUE_FOLLOW_UPS: tuple[str, ...] = (
    "what do you mean?", "so what should I do?", "hmm, are you sure?", "can you explain that in more detail?",
    "how so?", "I don't follow", "like what?", "why?", "go on", "and then?", "ok, what else?", "really?",
    "can you say that more simply?", "what's the catch?", "is there another way?",
    "thanks, anything else I should know?", "wait, why is that?", "that doesn't seem right",
    "could you give an example?", "ok and?",
)

# Short requests that name their own task, by the specialist that should take them.
SHORT_REQUESTS: dict[str, tuple[str, ...]] = {
    "code": (
        "write a bash one-liner to count the lines of every .py file",
        "how do I undo the last git commit?",
        "fix this: TypeError: 'NoneType' object is not subscriptable",
        "write a SQL query that finds duplicate emails",
        "what does git rebase -i do?",
        "turn this JSON into a Python dataclass: {\"id\": 1, \"name\": \"Ada\"}",
    ),
    "agent": (
        "set an alarm for 7am",
        "add milk to my shopping list",
        "text Sarah that I'm running late",
        "what's on my calendar tomorrow?",
        "order a pizza to my home address",
        "play some jazz in the living room",
    ),
    "ui": (
        "design a pricing page with three tiers",
        "make a login screen with a dark theme",
        "build a kanban board with drag and drop",
        "create a landing page for my bakery",
        "design a settings page with toggles for notifications",
        "mock up a mobile checkout screen",
    ),
    "chat": (
        "what's the capital of Australia?",
        "tell me a joke",
        "who wrote Pride and Prejudice?",
        "what is the difference between weather and climate?",
        "give me a quote about courage",
        "how many legs does a spider have?",
    ),
}


def _line(opening: tuple[str, str, str], turn: str, label: str, kind: str) -> dict[str, Any]:
    session, request, answer = opening
    return {
        "messages": [{"role": "user", "content": request}, {"role": "assistant", "content": answer},
                     {"role": "user", "content": turn}],
        "label": label, "session": session, "kind": kind, "source": SOURCE, "license": LICENSE,
    }


def build() -> list[dict[str, Any]]:
    """The panel's lines: every opening with every vague follow-up (stay), then every short request after one
    opening of each other specialist, the first or second in turn (switch)."""
    lines = [_line(opening, turn, opening[0], "stay") for opening in OPENINGS for turn in VAGUE_FOLLOW_UPS]
    for target, requests in SHORT_REQUESTS.items():
        for k, request in enumerate(requests):
            for session in SHORT_REQUESTS:
                if session != target:
                    openings = [o for o in OPENINGS if o[0] == session]
                    lines.append(_line(openings[k % len(openings)], request, target, "switch"))
    return lines


def render() -> str:
    """The file's text, one JSON line per panel line: what `write` stores and the staleness test compares."""
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in build())


def write(data_dir: str | Path | None = None) -> Path:
    """Rewrites the panel in the routing data folder (default: the shipped one); returns its path."""
    path = find_data_dir(data_dir) / FILE_NAME
    path.write_text(render(), encoding="utf-8")
    return path


def main() -> int:
    print(write())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
