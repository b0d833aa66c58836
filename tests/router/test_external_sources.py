"""External check sets: how the reader labels WizardLM's test set, that a text train or dev holds is
dropped, and that the shipped external.jsonl shares no text with train.jsonl or dev.jsonl (a set the
router trains on would check nothing)."""

from __future__ import annotations

import json
from pathlib import Path

from macaron.router.classifier import external_sources as es


def _wizardlm(root: Path) -> None:
    folder = root / "nlpxucan" / "WizardLM" / "WizardLM" / "data"
    folder.mkdir(parents=True)
    items = [
        (1, "Math", "What is the value of 2+2?"),
        (20, "Code Generation", "Given an array of integers, find the longest increasing subarray in Python."),
        (56, "Computer Science", "Identify some of the main components of a computer network."),
        (59, "Computer Science", "Write a Matlab program that prints the numbers from 1 to 100."),
        (60, "Computer Science", "What is the difference between a stack and a queue?"),
        (84, "Complex Format", "How can I use SQL to return the last record in each group of a table?"),
        (87, "Complex Format", "Given that the hypotenuse of a right triangle is 13, find the legs."),
        (96, "Code Debug", "What is wrong with this C++ code that is supposed to swap two numbers?"),
        (135, "Roleplay", "As a sports commentator, describe the winning play of a championship game"),
        (136, "Roleplay", "As  a sports commentator, describe the winning play of a championship game"),
    ]
    (folder / "WizardLM_testset.jsonl").write_text(
        "".join(json.dumps({"idx": i, "Skill": s, "Difficulty": 3, "Instruction": t}) + "\n" for i, s, t in items),
        encoding="utf-8")


def test_wizardlm_labels_and_what_is_left_out(tmp_path: Path) -> None:
    _wizardlm(tmp_path)
    known = {es.normalise("What is the value of 2+2?")}
    got = {r["text"]: r["label"] for r in es.rows(tmp_path, known)}
    assert got == {
        "Given an array of integers, find the longest increasing subarray in Python.": "code",
        "Identify some of the main components of a computer network.": "chat",
        "Write a Matlab program that prints the numbers from 1 to 100.": "code",
        "How can I use SQL to return the last record in each group of a table?": "code",
        "Given that the hypotenuse of a right triangle is 13, find the legs.": "chat",
        "What is wrong with this C++ code that is supposed to swap two numbers?": "code",
        "As a sports commentator, describe the winning play of a championship game": "chat",
    }  # 2+2 is known to training, the stack/queue question is unclear, the second commentator a repeat


def test_write_drops_texts_training_holds(tmp_path: Path) -> None:
    _wizardlm(tmp_path / "root")
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text(json.dumps({"text": "what is the VALUE of 2+2?", "label": "chat"}) + "\n")
    (data / "dev.jsonl").write_text("")
    counts = es.write(data, tmp_path / "root")
    lines = [json.loads(x) for x in (data / es.EXTERNAL_FILE).read_text().splitlines()]
    assert counts == {"code": 4, "chat": 3, "multiturn": {"switch": 7}} and len(lines) == 7
    assert all(line["source"].startswith("nlpxucan/WizardLM:") and line["license"] for line in lines)


def test_shipped_external_sets_are_never_trained_on(routing_data_dir: Path) -> None:
    external = [json.loads(x) for x in (routing_data_dir / es.EXTERNAL_FILE).read_text().splitlines() if x]
    assert len(external) >= 200
    assert {e["label"] for e in external} == {"chat", "agent", "code", "ui"}
    turns = [json.loads(x) for x in (routing_data_dir / es.EXTERNAL_MULTITURN_FILE).read_text().splitlines() if x]
    assert {t["kind"] for t in turns} == {"stay", "switch"}
    trained = es.training_texts(routing_data_dir)
    texts = [e["text"] for e in external] + [m["content"] for t in turns for m in t["messages"]]
    shared = [t for t in texts if es.normalise(t) in trained]
    assert not shared, f"external texts in train/dev: {shared[:3]}"


def test_real_users_set_is_written_apart_and_leaves_the_other_sets_alone(tmp_path: Path, monkeypatch) -> None:
    from macaron.router.classifier import public_sources as ps

    prompts = ["Write a poem about rain", "What is the value of 2+2?", "Given that the hypotenuse of a right "
               "triangle is 13, find the legs.", "Create a responsive instagram login page in flutter", "unlabelled"]
    arena = tmp_path / "root" / ps.ARENA_HARD.repository / ps.ARENA_HARD_FILE
    arena.parent.mkdir(parents=True)
    arena.write_text("".join(json.dumps({"uid": str(i), "prompt": p}) + "\n" for i, p in enumerate(prompts)))
    labels = tmp_path / "hand_labels"
    labels.mkdir()
    (labels / "arena_hard.jsonl").write_text("".join(
        json.dumps({"path": ps.ARENA_HARD_FILE, "sha256_16": ps.text_digest(p), "label": label}) + "\n"
        for p, label in zip(prompts, ("chat", "chat", "chat", "ui"))))
    monkeypatch.setattr(ps, "HAND_LABELS_DIR", labels)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text(json.dumps({"text": "what is the VALUE of 2+2?", "label": "chat"}) + "\n")
    external = json.dumps({"text": "Given that the hypotenuse of a right triangle is 13, find the legs.",
                           "label": "chat"}) + "\n"
    (data / es.EXTERNAL_FILE).write_text(external)
    assert es.write(data, tmp_path / "root") == {"real_users": {"chat": 1, "ui": 1}}
    assert (data / es.EXTERNAL_FILE).read_text() == external  # its sources are not under root: kept
    assert not (data / es.EXTERNAL_MULTITURN_FILE).exists()
    real = [json.loads(x) for x in (data / es.EXTERNAL_REAL_USERS_FILE).read_text().splitlines()]
    assert [(r["text"], r["label"]) for r in real] == [(prompts[0], "chat"), (prompts[3], "ui")]  # trained or
    assert {r["license"] for r in real} == {"Apache-2.0"}  # in the other set: dropped; unlabelled: left out


def test_shipped_real_users_set_is_never_trained_on_nor_in_the_other_set(routing_data_dir: Path) -> None:
    real = [json.loads(x) for x in (routing_data_dir / es.EXTERNAL_REAL_USERS_FILE).read_text().splitlines() if x]
    assert len(real) >= 600 and {r["label"] for r in real} >= {"chat", "code", "ui"}
    known = es.training_texts(routing_data_dir) | {
        es.normalise(json.loads(x)["text"]) for x in (routing_data_dir / es.EXTERNAL_FILE).read_text().splitlines() if x}
    shared = [r["text"] for r in real if es.normalise(r["text"]) in known]
    assert not shared, f"real users' texts in training or external.jsonl: {shared[:3]}"


def _agent_and_ui_sources(root: Path) -> None:
    jarvis = root / "microsoft" / "JARVIS" / "taskbench" / "data_dailylifeapis"
    jarvis.mkdir(parents=True)
    jarvis.joinpath("user_requests.json").write_text("".join(
        json.dumps({"id": str(i), "user_request": f"Book a table for {i} people at Example Bistro tonight. "})
        + "\n" for i in range(es.TASKBENCH_SAMPLE + 20)), encoding="utf-8")
    rest = root / "Yifan-Song793" / "RestGPT" / "datasets"
    rest.mkdir(parents=True)
    rest.joinpath("spotify.json").write_text(json.dumps([{"query": "Skip to the next track", "solution": []}]))
    tasks = root / "MAPS-research" / "EvoGenUI-Bench" / "bench" / "task_subsets"
    for subset, name, turns in (
            ("interactive_ui_50", "Lens Lab.json", ["Create an interactive thin-lens ray lab page.", "Add a lens."]),
            ("presentation_ui_50", "War Room.json", ["Build a one-page margin war-room board.",
                                                     "Reframe it for the CFO.", "Fit it on one page."]),
            ("presentation_ui_50", "Wall.json", ["Create a ransomware evidence wall.", "Add three priorities."]),
            ("tool_grounded_action_ui_50", "Party.json", ["Build a block-party assignment board.",
                                                          "Send the assignments if it validates."])):
        (tasks / subset).mkdir(parents=True, exist_ok=True)
        (tasks / subset / name).write_text(json.dumps({"task_id": name, "turns": [
            {"turn": i + 1, "prompt": t} for i, t in reversed(list(enumerate(turns)))]}))


def test_agent_and_ui_sources_are_read_and_labelled(tmp_path: Path) -> None:
    _agent_and_ui_sources(tmp_path)
    got = es.rows(tmp_path, set())
    by_source = {}
    for r in got:
        by_source.setdefault(r["source"].split(":")[0], []).append((r["text"], r["label"]))
    taskbench = by_source["microsoft/JARVIS"]
    assert len(taskbench) == es.TASKBENCH_SAMPLE and {label for _, label in taskbench} == {"agent"}
    assert all(not text.endswith(" ") for text, _ in taskbench)
    assert by_source["Yifan-Song793/RestGPT"] == [("Skip to the next track", "agent")]
    assert by_source["MAPS-research/EvoGenUI-Bench"] == [  # the interactive subset trains the router: not read
        ("Create a ransomware evidence wall.", "ui"), ("Build a one-page margin war-room board.", "ui"),
        ("Build a block-party assignment board.", "ui")]


def test_conversations_stay_in_ui_and_switch_between_every_pair(tmp_path: Path) -> None:
    _agent_and_ui_sources(tmp_path)
    _wizardlm(tmp_path)
    singles = es.rows(tmp_path, set())
    known = {es.normalise("Add three priorities.")}
    lines = es.conversations(tmp_path, singles, known)
    stays = [x for x in lines if x["kind"] == "stay"]
    assert [[m["content"] for m in x["messages"]] for x in stays] == [  # a task with a known turn is left out
        ["Build a one-page margin war-room board.", "Reframe it for the CFO."],
        ["Build a one-page margin war-room board.", "Reframe it for the CFO.", "Fit it on one page."]]
    assert all(x["label"] == x["session"] == "ui" for x in stays)  # no tool-grounded (action) turn stays
    switches = [x for x in lines if x["kind"] == "switch"]
    assert all(x["label"] != x["session"] and len(x["messages"]) == 2 for x in switches)
    assert {(x["session"], x["label"]) for x in switches} >= {("ui", "agent"), ("agent", "ui"), ("chat", "code")}
    per_session: dict[str, int] = {}
    for x in switches:
        per_session[x["session"]] = per_session.get(x["session"], 0) + 1
    assert per_session == {"agent": es.SWITCH_HISTORIES_PER_LABEL, "chat": 4, "code": 4, "ui": 3}
    assert all(x["source"] and x["license"] and x["history_source"] for x in switches)
    assert es.conversations(tmp_path, singles, known) == lines  # fixed seed: the same file every run


def test_what_training_reads_covers_the_multi_turn_files(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text(json.dumps({"text": "Plot  my steps", "label": "ui"}) + "\n")
    (tmp_path / "dev.jsonl").write_text("")
    (tmp_path / "conversations.jsonl").write_text(json.dumps({"conversation": [
        {"role": "user", "content": "Write a sonnet."}, {"role": "assistant", "content": "Shall I ..."},
        {"role": "user", "content": "Make it rhyme."}], "label": "chat"}) + "\n")
    (tmp_path / "multiturn_train.jsonl").write_text(json.dumps({"messages": [
        {"role": "user", "content": "Fix my regex."}, {"role": "user", "content": "Now in Go."}],
        "label": "code"}) + "\n")
    assert es.training_texts(tmp_path) == {"plot my steps", "write a sonnet.", "make it rhyme.", "fix my regex.",
                                           "now in go."}
