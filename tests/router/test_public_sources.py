"""Routing data from public dataset repositories: what each reader takes, its labels, what it
leaves out, the split by unit (no text in both), and a rerun that changes nothing."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from macaron.router.classifier import public_sources as ps


def _repositories(root: Path) -> Path:
    """One small file per repository, in the layout and format each repository has."""
    svamp = root / "arkilpatel" / "SVAMP"
    svamp.mkdir(parents=True)
    (svamp / "SVAMP.json").write_text(json.dumps([
        {"ID": "chal-2", "Body": "Dan had $ 3 left with him after he bought a candy bar. If he had $ 4 at the start",
         "Question": "How much did the candy bar cost?"}]), encoding="utf-8")
    asdiv = root / "chaochun" / "nlu-asdiv-dataset" / "dataset"
    asdiv.mkdir(parents=True)
    (asdiv / "ASDiv.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8" ?><Machine-Reading-Corpus-File><ProblemSet>'
        '<Problem ID="nluds-0001"><Body>Seven red apples and two green apples are in the basket.</Body>'
        '<Question>How many apples are in the basket?</Question></Problem></ProblemSet>'
        '</Machine-Reading-Corpus-File>', encoding="utf-8")
    sgd = root / "google-research-datasets" / "dstc8-schema-guided-dialogue" / "train"
    sgd.mkdir(parents=True)
    turns = [("USER", "I am feeling hungry so I would like to find a place to eat."),
             ("SYSTEM", "Where should it be?"), ("USER", "I would like for it to be in San Jose."),
             ("SYSTEM", "71 Saint Peter is a good restaurant."), ("USER", "Can you give me the address?"),
             ("SYSTEM", "71 North San Pedro Street.")]
    (sgd / "dialogues_001.json").write_text(json.dumps([
        {"dialogue_id": "1_00000", "turns": [{"speaker": s, "utterance": u} for s, u in turns]},
        {"dialogue_id": "1_00001", "turns": [{"speaker": "USER", "utterance": "Can you help me?"}]}]), encoding="utf-8")
    (sgd / "dialogues_002.json").write_text("[{\"dialogue_id\": ", encoding="utf-8")  # cut short: skipped
    hwu = root / "xliuhw" / "NLU-Evaluation-Data" / ps.HWU_FOLDER
    hwu.mkdir(parents=True)
    header = "answerid;scenario;intent;answer_annotation;answer_from_anno;answer_from_user\n"
    (hwu / "alarm_set.csv").write_text(header + '1;alarm;set;"x";"x";"wake me up at five am"\n', encoding="utf-8")
    (hwu / "qa_factoid.csv").write_text(header + '2;qa;factoid;"x";"x";"how tall is mount everest"\n', encoding="utf-8")
    (hwu / "general_affirm.csv").write_text(header + '3;general;affirm;"x";"x";"yes that is right"\n', encoding="utf-8")
    tldr = root / "tldr-pages" / "tldr" / "pages" / "common"
    tldr.mkdir(parents=True)
    (tldr / "tar.md").write_text(
        "# tar\n\n> Archiving utility.\n\n- [c]reate a g[z]ipped archive and write it to a [f]ile:\n\n"
        "`tar czf {{path/to/target.tar.gz}} {{path/to/file}}`\n\n- E[x]tract:\n\n`tar xf {{source.tar}}`\n",
        encoding="utf-8")
    cosqa = root / "microsoft" / "CodeXGLUE" / "Text-Code" / "NL-code-search-WebQuery" / "CoSQA"
    cosqa.mkdir(parents=True)
    (cosqa / "cosqa-dev.json").write_text(json.dumps([
        {"idx": "cosqa-dev-0", "doc": "python remove first n item", "code": "x[n:]"},
        {"idx": "cosqa-dev-1", "doc": "python  remove first n item", "code": "del x[:n]"}]), encoding="utf-8")
    for project, lines in (("calculator", ["Add a sqrt button with text '√' to the right of the clear button.",
                                           "Add a square button to the right of the sqrt button.",
                                           "Change default theme to dark.",
                                           "JS class Question constructor params are: title (string), name (string)."]),
                           ("esmodule", ["Named function 'log' appends a log item to the page body element.",
                                         "Export the log function as the default export of log.js."])):
        folder = root / "bytedance" / "web-bench" / "projects" / project
        folder.mkdir(parents=True)
        (folder / "tasks.jsonl").write_text("".join(json.dumps({"id": f"task-{i}", "description": d}) + "\n"
                                                    for i, d in enumerate(lines, 1)), encoding="utf-8")
    return root


def test_readers_labels_and_filters(tmp_path: Path) -> None:
    found = {r["text"]: r for r in ps.rows(_repositories(tmp_path / "src"))}
    assert found["Dan had $3 left with him after he bought a candy bar. If he had $4 at the start, "
                 "how much did the candy bar cost?"]["label"] == "chat"
    assert found["Seven red apples and two green apples are in the basket. How many apples are in the basket?"][
        "source"] == "chaochun/nlu-asdiv-dataset:dataset/ASDiv.xml"
    sgd = found["I am feeling hungry so I would like to find a place to eat."]
    assert (sgd["label"], sgd["license"]) == ("agent", "CC BY-SA 4.0")
    assert "Can you help me?" not in found  # no request in it
    assert found["wake me up at five am"]["label"] == "agent"
    assert found["how tall is mount everest"]["label"] == "chat"
    assert "yes that is right" not in found  # no domain
    assert found["create a gzipped archive and write it to a file"]["label"] == "code"
    assert "Extract" not in found  # too short to be a request
    assert [t for t in found if "remove first n item" in t] == ["python remove first n item"]  # deduplicated
    assert found["Change default theme to dark."]["label"] == "ui"
    assert not any(t.startswith("JS class Question") for t in found)  # a class definition: `code` as much as `ui`
    assert found["Export the log function as the default export of log.js."]["split"] == "dev"  # a dev project
    assert found["Change default theme to dark."]["split"] == "train"


def test_conversations_are_real_follow_ups(tmp_path: Path) -> None:
    convs = ps.conversations(_repositories(tmp_path / "src"))
    sgd = next(c for c in convs if c["source"].startswith("google-research-datasets/"))
    assert [m["role"] for m in sgd["conversation"]] == ["user", "assistant", "user", "assistant", "user"]
    assert sgd["conversation"][-1]["content"] == "Can you give me the address?" and sgd["label"] == "agent"
    assert sgd["tools"] is True  # SGD's services are schema-described APIs
    web = [c for c in convs if c["source"].startswith("bytedance/web-bench")]
    assert {(c["label"], c["split"]) for c in web} == {("ui", "train"), ("code", "dev")}


def test_write_replaces_dedupes_and_is_idempotent(tmp_path: Path) -> None:
    root = _repositories(tmp_path / "src")
    data = tmp_path / "data"
    data.mkdir()
    other = {"text": "wake me up at five am", "label": "agent", "source": "other/repo:f.json", "license": "MIT"}
    (data / "train.jsonl").write_text(json.dumps(other) + "\n", encoding="utf-8")
    (data / "dev.jsonl").write_text("", encoding="utf-8")
    (data / "conversations.jsonl").write_text("", encoding="utf-8")
    first = ps.write(data, root)
    texts = [json.loads(line)["text"] for s in ("train", "dev")
             for line in (data / f"{s}.jsonl").read_text(encoding="utf-8").splitlines()]
    assert texts.count("wake me up at five am") == 1 and len(texts) == len(set(texts))
    assert first["train"] + first["dev"] == len(texts) - 1
    snapshot = [(data / name).read_text(encoding="utf-8") for name in ("train.jsonl", "dev.jsonl", "conversations.jsonl")]
    assert ps.write(data, root) == first
    assert [(data / name).read_text(encoding="utf-8")
            for name in ("train.jsonl", "dev.jsonl", "conversations.jsonl")] == snapshot


def _developer_and_assistant_repositories(root: Path) -> Path:
    """The sources of developer questions, search-box questions and API-backed orders, one small file each."""
    conala = root / "zorazrw" / "multilingual-conala" / "dataset" / "train"
    conala.mkdir(parents=True)
    (conala / "train.json").write_text(json.dumps([
        {"intent": "Calling an external command", "rewritten_intent": "x", "snippet": "os.system(c)",
         "question_id": 89228},
        {"intent": "Calling an external command", "rewritten_intent": "y", "snippet": "subprocess.call(c)",
         "question_id": 89228},
        {"intent": "Python", "rewritten_intent": "z", "snippet": "", "question_id": 1}]), encoding="utf-8")
    staqc = root / "LittleYUYU" / "StackOverflow-Question-Code-Dataset" / ps.STAQC_SQL
    staqc.parent.mkdir(parents=True)
    titles = {12451878: "mysql select where array in array", 7: "Joins", 8: "A &amp; B join order"}
    staqc.write_bytes(pickle.dumps(titles, protocol=2))
    csn = root / "github" / "CodeSearchNet" / "resources"
    csn.mkdir(parents=True)
    (csn / "queries.csv").write_text("query\nconvert int to string\npriority queue\nregex\n", encoding="utf-8")
    wq = root / "brmson" / "dataset-factoid-webquestions" / "main"
    wq.mkdir(parents=True)
    (wq / "trainmodel.json").write_text(json.dumps([
        {"qId": "wqr000007", "answers": ["Washington"], "qText": "where are the nfl redskins from?"},
        {"qId": "wqr000009", "answers": ["x"], "qText": "who?"}]), encoding="utf-8")
    tm4 = root / "google-research-datasets" / "Taskmaster" / "TM-4-2024" / "data"
    tm4.mkdir(parents=True)
    call = [{"name": "api_call", "value": "get_menu_items", "context": "api_call_0"},
            {"name": "request", "value": "{\"query\": \"Mocha\"}", "context": "api_call_0"},
            {"name": "api_response", "value": "get_menu_items", "context": "api_response_0"},
            {"name": "response", "value": "{\"menu_items\": [\"mocha-7466\"]}", "context": "api_response_0"},
            {"name": "api_call", "value": "add_order_item", "context": "api_call_1"}]
    order = [("user", "Hey, can I get a Mocha, please?", call), ("assistant", "Does the order look right?", []),
             ("user", "Yep. That looks good.", []), ("assistant", "Pick it up at the bar.", [])]
    question = [("user", "What do you put in a Steamer?", []), ("assistant", "Steamed milk.", [])]
    (tm4 / "data_00.json").write_text(json.dumps([
        {"conversation_id": f"dlg-{i}",
         "utterances": [{"index": k, "speaker": s, "text": t, "annotations": a} for k, (s, t, a) in enumerate(turns)]}
        for i, turns in enumerate((order, question))]), encoding="utf-8")
    return root


def test_developer_questions_search_questions_and_orders(tmp_path: Path) -> None:
    found = {r["text"]: r for r in ps.rows(_developer_and_assistant_repositories(tmp_path / "src"))}
    assert found["Calling an external command"]["label"] == "code"  # once: one question, two snippets
    assert "Python" not in found  # one word is no question
    assert found["mysql select where array in array"]["license"] == "CC BY 4.0 (StaQC)"
    assert found["A & B join order"]["label"] == "code" and "Joins" not in found
    assert found["convert int to string"]["label"] == found["priority queue"]["label"] == "code"
    assert "regex" not in found
    assert found["where are the nfl redskins from?"]["label"] == "chat" and "who?" not in found
    assert found["Hey, can I get a Mocha, please?"]["label"] == "agent"
    assert "What do you put in a Steamer?" not in found  # a question about a drink reads as chat alone


def test_taskmaster_keeps_the_first_api_call_as_a_tool_loop(tmp_path: Path) -> None:
    convs = ps.conversations(_developer_and_assistant_repositories(tmp_path / "src"))
    (tm4,) = [c for c in convs if c["source"].startswith("google-research-datasets/Taskmaster")]
    roles = [m["role"] for m in tm4["conversation"]]
    assert roles == ["user", "tool_call", "tool", "assistant", "user"]
    assert json.loads(tm4["conversation"][1]["content"]) == {"name": "get_menu_items", "arguments": {"query": "Mocha"}}
    assert tm4["label"] == "agent" and tm4["tools"] is True


def test_a_pickle_that_names_a_callable_is_refused(tmp_path: Path) -> None:
    root = _developer_and_assistant_repositories(tmp_path / "src")
    repository = root / "LittleYUYU" / "StackOverflow-Question-Code-Dataset"
    (repository / ps.STAQC_SQL).write_bytes(pickle.dumps({1: Path("x")}))
    with pytest.raises(pickle.UnpicklingError):
        list(ps.staqc_sql(repository))


def test_generative_ui_prompts_keep_only_lines_that_name_a_ui(tmp_path: Path) -> None:
    repository = tmp_path / "src" / "prp-e" / "generative_ui_prompts"
    repository.mkdir(parents=True)
    (repository / "prompts.md").write_text(
        "- A search bar with a magnifying glass icon.\n"
        "- A wellness-centered blog post outlining effective stress management techniques.\n"
        "- A farm-to-table marketing firm connecting farmers with local markets\n"
        "- A contact form\n"
        "- A UI\n", encoding="utf-8")
    (repository / "prompts_old.md").write_text(
        "1. A mobile app for tracking and reducing energy consumption at home\n"
        "2. A remote team collaboration tool with video conferencing\n"
        "3. A contact form\n", encoding="utf-8")
    (repository / "prompt_generator.md").write_text(
        "# Prompt Generator\n\nHello ChatGPT.\n\n* A SaaS admin dashboard with a sidebar, a few key metric cards, "
        "and a report table.\n", encoding="utf-8")
    found = {r["text"]: r for r in ps.rows(tmp_path / "src")}
    assert set(found) == {"A search bar with a magnifying glass icon.", "A contact form",
                          "A mobile app for tracking and reducing energy consumption at home",
                          "A SaaS admin dashboard with a sidebar, a few key metric cards, and a report table."}
    assert {r["label"] for r in found.values()} == {"ui"}
    assert found["A contact form"]["source"] == "prp-e/generative_ui_prompts:prompts.md"  # once, where first seen
    assert found["A contact form"]["license"] == "MIT"


def _hand_labels(tmp_path: Path, monkeypatch, name: str, labels: list[tuple[str, str, str | None]]) -> None:
    """A hand-label file `name` of (path, text, label) lines, in place of the shipped ones."""
    folder = tmp_path / "hand_labels"
    folder.mkdir()
    (folder / f"{name}.jsonl").write_text("".join(
        json.dumps({"path": path, "sha256_16": ps.text_digest(text), "label": label}) + "\n"
        for path, text, label in labels), encoding="utf-8")
    monkeypatch.setattr(ps, "HAND_LABELS_DIR", folder)


def test_instruction_wild_reads_its_loose_json_and_keeps_only_hand_labelled_texts(tmp_path: Path, monkeypatch) -> None:
    repository = tmp_path / "src" / "XueFuzhao" / "InstructionWild" / "data_v2"
    repository.mkdir(parents=True)
    # as the files have them: a raw newline inside a string, a regex's stray backslash, one object per line
    (repository / "user_1.jsonl").write_text(
        '{"instruction":"Fix this:\nfor(i=0;i<5;i++){}","instruction_type":"Generation"}\n'
        '{"instruction":"Write a poem about Xbox","instruction_type":"Generation"}\n', encoding="utf-8")
    (repository / "user_2.jsonl").write_text(
        '{"instruction": "What does this regex do? (\\d+)"}\n{"instruction": "cat /etc/oracle-release"}\n'
        '{"instruction": "Why does \\\\d match in C:\\\\data?"}\n',
        encoding="utf-8")
    _hand_labels(tmp_path, monkeypatch, "instruction_wild", [
        ("data_v2/user_1.jsonl", "Fix this:\nfor(i=0;i<5;i++){}", "code"),
        ("data_v2/user_1.jsonl", "Write a poem about Xbox", "chat"),
        ("data_v2/user_2.jsonl", "What does this regex do? (\\d+)", "code"),
        ("data_v2/user_2.jsonl", "cat /etc/oracle-release", None),
        ("data_v2/user_2.jsonl", "Why does \\d match in C:\\data?", "code"),
    ])
    found = {r["text"]: r["label"] for r in ps.rows(tmp_path / "src")}
    assert found == {"Fix this:\nfor(i=0;i<5;i++){}": "code", "Write a poem about Xbox": "chat",
                     "What does this regex do? (\\d+)": "code",  # the one read and left out is not there
                     "Why does \\d match in C:\\data?": "code"}


def test_every_instruction_wild_line_in_the_data_carries_its_hand_label() -> None:
    labels = ps.hand_labels("instruction_wild")
    data_dir = Path(ps.__file__).resolve().parent / "routing_data"
    lines = [json.loads(line) for split in ("train", "dev")
             for line in (data_dir / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]
    wild = [line for line in lines if line["source"].startswith("XueFuzhao/InstructionWild:")
            and not line["source"].endswith(ps.INSTRUCTION_WILD_CHINESE)]  # those carry their English twin's label
    assert len(wild) > 800
    assert all(labels.get(ps.text_digest(line["text"])) == line["label"] for line in wild)
    assert set(labels.values()) <= {"chat", "agent", "code", "ui", None}


def test_requests_in_other_languages_pair_with_their_english_twins(tmp_path: Path, monkeypatch) -> None:
    """InstructionWild's Chinese seeds take their English twin's hand label and unit (one split for both) and
    come after every English line; MCoNaLa's questions are `code`, each question once."""
    wild = tmp_path / "src" / "XueFuzhao" / "InstructionWild"
    (wild / "data_v2").mkdir(parents=True)
    (wild / "data").mkdir()
    (wild / "data_v2" / "user_1.jsonl").write_text(
        '{"instruction":"Write a poem about Xbox"}\n{"instruction":"Sort a list in Python"}\n'
        '{"instruction":"cat /etc/oracle-release"}\n', encoding="utf-8")
    (wild / "data" / "seed_prompts_ch.jsonl").write_text(
        '{"instruction": "写一首关于Xbox的诗"}\n{"instruction": "用Python给列表排序"}\n'
        '{"instruction": "cat /etc/oracle-release"}\n', encoding="utf-8")
    _hand_labels(tmp_path, monkeypatch, "instruction_wild", [
        ("data_v2/user_1.jsonl", "Write a poem about Xbox", "chat"),
        ("data_v2/user_1.jsonl", "Sort a list in Python", "code"),
        ("data_v2/user_1.jsonl", "cat /etc/oracle-release", None),
    ])
    conala = tmp_path / "src" / "zorazrw" / "multilingual-conala" / "dataset" / "test"
    conala.mkdir(parents=True)
    (conala.parent / "train").mkdir()
    (conala.parent / "train" / "train.json").write_text("[]", encoding="utf-8")
    (conala / "ru_test.json").write_text(json.dumps([
        {"intent": "Сделать первую букву  каждого слова заглавной", "question_id": 7},
        {"intent": "Сделать первую букву каждого слова заглавной", "question_id": 7},  # a second snippet
        {"intent": "Как удалить дубликаты из списка", "question_id": 8}]), encoding="utf-8")
    found = ps.rows(tmp_path / "src")
    other = [r for r in found if r["source"].endswith((ps.INSTRUCTION_WILD_CHINESE, *ps.MCONALA_FILES))]
    assert found[-len(other):] == other  # after the English lines, which keep their order and splits
    assert {r["text"]: r["label"] for r in other} == {
        "写一首关于Xbox的诗": "chat", "用Python给列表排序": "code",  # the twin read and left out is not there
        "Сделать первую букву каждого слова заглавной": "code", "Как удалить дубликаты из списка": "code"}
    split = {r["text"]: r["split"] for r in found}
    assert split["写一首关于Xbox的诗"] == split["Write a poem about Xbox"]
    assert split["用Python给列表排序"] == split["Sort a list in Python"]
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.jsonl", "dev.jsonl", "conversations.jsonl"):
        (data / name).write_text("", encoding="utf-8")
    assert ps.main(["--root", str(tmp_path / "src"), "--data-dir", str(data)]) == 0  # the builder's command line
    written = (data / "train.jsonl").read_text(encoding="utf-8") + (data / "dev.jsonl").read_text(encoding="utf-8")
    assert "Xbox的诗" in written and "Write a poem about Xbox" in written
    (wild / "data" / "seed_prompts_ch.jsonl").write_text('{"instruction": "写一首关于Xbox的诗"}\n', encoding="utf-8")
    assert not any(r["source"].endswith(ps.INSTRUCTION_WILD_CHINESE)  # a pairing it cannot trust: nothing read
                   for r in ps.rows(tmp_path / "src"))


def test_arena_hard_keeps_hand_labelled_requests_the_classifier_can_read_whole(tmp_path: Path, monkeypatch) -> None:
    repository = tmp_path / "src" / "lmarena" / "arena-hard-auto" / "data" / "arena-hard-v2.0"
    repository.mkdir(parents=True)
    prompts = ["Write a poem about rain", "make the code for the snake game playable fully in the terminal",
               "give me code to test it with dummy inputs :\u2028image_points = np.array([1])",  # a line separator
               "Create a responsive instagram login page in flutter", "x" * (ps.ARENA_HARD_MAX_CHARS + 1),
               "data dump without a question", "never labelled"]
    (repository / "question.jsonl").write_text("".join(
        json.dumps({"uid": str(i), "prompt": p}, ensure_ascii=False) + "\n" for i, p in enumerate(prompts)),
        encoding="utf-8")
    path = ps.ARENA_HARD_FILE
    _hand_labels(tmp_path, monkeypatch, "arena_hard", [
        (path, prompts[0], "chat"), (path, prompts[1], "code"),
        (path, "give me code to test it with dummy inputs :\nimage_points = np.array([1])", "code"),
        (path, prompts[3], "ui"), (path, prompts[4], "code"), (path, prompts[5], None)])
    assert ps.rows(tmp_path / "src") == []  # measured, not in the shipped sources
    found = {r["text"]: r["label"] for r in ps.rows(tmp_path / "src", (ps.ARENA_HARD,))}
    assert found == {prompts[0]: "chat", prompts[1]: "code", prompts[3]: "ui",
                     "give me code to test it with dummy inputs :\nimage_points = np.array([1])": "code"}


def test_maths_sources_keep_the_problem_as_chat_and_only_openly_licensed_textbooks(tmp_path: Path) -> None:
    math = tmp_path / "src" / "ZubinGou" / "math-evaluation-harness" / "data" / "math"
    math.mkdir(parents=True)
    (math / "test.jsonl").write_text("".join(json.dumps(item) + "\n" for item in (
        {"problem": "How many vertical asymptotes does the graph of $y=\\frac{2}{x^2+x-6}$ have?",
         "solution": "The denominator factors ... $\\boxed{2}$", "idx": 0},
        {"problem": "  ", "idx": 1})) + "\n", encoding="utf-8")
    college = tmp_path / "src" / "QwenLM" / "Qwen2.5-Math" / "evaluation" / "data" / "college_math"
    college.mkdir(parents=True)
    (college / "test.jsonl").write_text("".join(json.dumps(item) + "\n" for item in (
        {"data_source": "college_math.Calculus", "question_number": "1.2", "license":
         "Creative Commons Attribution Non-Commercial ShareAlike 4.0 International License (CC BY-NC-SA 4.0)",
         "question": "Find the derivative of the function:\n$\\frac{1}{1+1 / x}$"},
        {"data_source": "college_math.Linear", "question_number": "3", "license": "Creative Commons License  (CC BY)",
         "question": "Unitarily diagonalize the hermitian matrix $A$."},
        {"data_source": "college_math.Vector", "question_number": "4", "license": "GNU Free Documentation License",
         "question": "Evaluate the given triple integral."},
        {"data_source": "college_math.PRECALCULUS", "question_number": "5", "license": "Creative Commons License",
         "question": "Solve the equation: $\\arccos (2 x)=\\pi$"},  # no version, no terms: left out
        {"data_source": "college_math.Probability", "question_number": "6",
         "license": "The book is copyright (c) by its authors. It may be copied ... provided no money is charged.",
         "question": "Compute the joint cdf."})), encoding="utf-8")
    found = {r["text"]: r for r in ps.rows(tmp_path / "src")}
    assert {t: r["label"] for t, r in found.items()} == {
        "How many vertical asymptotes does the graph of $y=\\frac{2}{x^2+x-6}$ have?": "chat",
        "Find the derivative of the function:\n$\\frac{1}{1+1 / x}$": "chat",
        "Unitarily diagonalize the hermitian matrix $A$.": "chat",
        "Evaluate the given triple integral.": "chat"}
    assert found["Evaluate the given triple integral."]["source"] == "QwenLM/Qwen2.5-Math:" + ps.COLLEGE_MATH_FILE


@pytest.mark.parametrize(("path", "requests"), [(ps.ARENA_HARD_FILE, 750), (ps.ARENA_HARD_V01_FILE, 500)])
def test_arena_hard_hand_labels_cover_every_request_once(path: str, requests: int) -> None:
    name = ps.ARENA_HAND_LABELS[path]
    lines = [json.loads(line) for line in (ps.HAND_LABELS_DIR / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(lines) == requests and len({line["sha256_16"] for line in lines}) == requests
    assert {line["label"] for line in lines} <= {"chat", "agent", "code", "ui", None}
    assert all(line["path"] == path for line in lines)


def test_toolalpaca_keeps_hand_labelled_requests_split_by_api(tmp_path: Path, monkeypatch) -> None:
    repository = tmp_path / "src" / "tangqiaoyu" / "ToolAlpaca" / "data"
    repository.mkdir(parents=True)
    (repository / "eval_real.json").write_text(json.dumps([
        {"Name": "weatherstack", "Instructions": ["What's the  weather in Paris right now?",
                                                  '"Find a Chuck Norris joke about music."']},
        {"Name": "WolframAlpha", "Instructions": ["What is the square root of 625?"]}]), encoding="utf-8")
    _hand_labels(tmp_path, monkeypatch, "toolalpaca", [
        ("data/eval_real.json", "What's the weather in Paris right now?", "agent"),
        ("data/eval_real.json", "Find a Chuck Norris joke about music.", "chat"),
        ("data/eval_real.json", "What is the square root of 625?", None),
    ])
    found = {r["text"]: r for r in ps.rows(tmp_path / "src")}
    assert {t: r["label"] for t, r in found.items()} == {  # spaces and the quotes around a request cleaned
        "What's the weather in Paris right now?": "agent", "Find a Chuck Norris joke about music.": "chat"}
    assert len({r["split"] for r in found.values()}) == 1  # one API, one split
    assert found["What's the weather in Paris right now?"]["license"] == "Apache-2.0"


def _api_bank(root: Path) -> Path:
    folder = root / "AlibabaResearch" / "DAMO-ConvAI" / ps.API_BANK_DIR / "level-1-given-desc"
    folder.mkdir(parents=True)
    hotel = [
        {"role": "User", "text": "Please book a hotel room for two adults."},
        {"role": "AI", "text": "Sure, where do you want to book the hotel?"},
        {"role": "User", "text": "How about the Hilton in San Francisco?"},
        {"role": "API", "api_name": "BookHotel", "param_dict": {"hotel_name": "Hilton"},
         "result": {"api_name": "BookHotel", "output": "11", "exception": None}},
        {"role": "AI", "text": "Booked. Your order ID is 11."},
        {"role": "User", "text": "Thank you so much!"},
    ]
    (folder / "BookHotel-level-1-1.jsonl").write_text("".join(json.dumps(t) + "\n" for t in hotel), encoding="utf-8")
    (folder / "Calculator-level-1-1.jsonl").write_text(json.dumps(
        {"role": "User", "text": "Can you calculate (5+6)*3 for me?"}) + "\n", encoding="utf-8")
    (folder / "BookHotel-level-1-2.jsonl").write_text(json.dumps(  # the annotators' template opening
        {"role": "User", "text": "Hi, can you help me book a hotel room?"}) + "\n", encoding="utf-8")
    return root


def test_api_bank_takes_the_openings_of_assistant_apis_and_their_follow_ups(tmp_path: Path) -> None:
    root = _api_bank(tmp_path / "src")
    found = {r["text"]: r for r in ps.rows(root)}
    assert set(found) == {"Please book a hotel room for two adults."}  # the calculator's and the template left out
    assert found["Please book a hotel room for two adults."]["label"] == "agent"
    (conv,) = ps.conversations(root)
    roles = [m["role"] for m in conv["conversation"]]
    assert roles == ["user", "assistant", "user", "tool_call", "tool", "assistant", "user"]
    assert json.loads(conv["conversation"][3]["content"]) == {"name": "BookHotel", "arguments": {"hotel_name": "Hilton"}}
    assert conv["label"] == "agent" and conv["tools"] is True


def _mt_bench_101(root: Path) -> Path:
    folder = root / "mtbench101" / "mt-bench-101" / "data" / "subjective"
    folder.mkdir(parents=True)
    dialogues = [
        {"task": "FR", "id": 1, "history": [
            {"user": "What are the potential side effects of antibiotics?", "bot": "Nausea and diarrhoea."},
            {"user": "Could you present the same information as a list?", "bot": "- Nausea\n- Diarrhoea"}]},
        {"task": "SI", "id": 2, "history": [
            {"user": "Convert this Python 2 code to Python 3 for me.", "bot": "Sure, send it."},
            {"user": 'print "Hello, world!"', "bot": 'print("Hello, world!")'}]},
        {"task": "IC", "id": 3, "history": [
            {"user": "What's going on with the stock market today?", "bot": "Which market?"},
            {"user": "The NASDAQ.", "bot": "..."}]},
        {"task": "TS", "id": 4, "history": [
            {"user": "Any tips for a birthday gift for my friend?", "bot": "A smartwatch."},
            {"user": "Switching gears, do you know a lasagna recipe?", "bot": "Yes."}]},
        {"task": "SA", "id": 5, "history": [{"user": "Who directed Inception?", "bot": "Christopher Nolan."}]},
    ]
    (folder / "mtbench101.jsonl").write_text("".join(json.dumps(d) + "\n" for d in dialogues), encoding="utf-8")
    return root


def test_mt_bench_101_gives_real_follow_ups_chat_unless_hand_labelled(tmp_path: Path, monkeypatch) -> None:
    root = _mt_bench_101(tmp_path / "src")
    _hand_labels(tmp_path, monkeypatch, "mt_bench_101", [
        (ps.MT_BENCH_101_FILE, "Convert this Python 2 code to Python 3 for me.", "code"),
        (ps.MT_BENCH_101_FILE, "What's going on with the stock market today?", None),  # live data: left out
    ])
    assert ps.rows(root) == []  # conversations only: no single-turn lines
    conversations = {c["conversation"][0]["content"]: c for c in ps.conversations(root)}
    # chat by default, the code one by its hand label; the left-out, the topic shift and a lone turn are not read
    assert {opening: c["label"] for opening, c in conversations.items()} == {
        "What are the potential side effects of antibiotics?": "chat",
        "Convert this Python 2 code to Python 3 for me.": "code"}
    side_effects = conversations["What are the potential side effects of antibiotics?"]
    assert [m["role"] for m in side_effects["conversation"]] == ["user", "assistant", "user"]  # ends on the follow-up
    assert side_effects["conversation"][1]["content"] == "Nausea and diarrhoea."  # the assistant's real reply
    assert side_effects["conversation"][-1]["content"] == "Could you present the same information as a list?"
    assert side_effects["license"] == "Apache-2.0" and "tools" not in side_effects  # no functions declared


def test_every_mt_bench_101_conversation_in_the_data_is_chat_unless_hand_labelled() -> None:
    labels = ps.hand_labels("mt_bench_101")
    data_dir = Path(ps.__file__).resolve().parent / "routing_data"
    lines = [json.loads(line) for line in (data_dir / "conversations.jsonl").read_text(encoding="utf-8").splitlines()]
    mt = [line for line in lines if line["source"].startswith("mtbench101/mt-bench-101:")]
    assert len(mt) == 300
    assert all(labels.get(ps.text_digest(" ".join(line["conversation"][0]["content"].split())), "chat") == line["label"]
               for line in mt)
    assert set(labels.values()) <= {"code", None}


def _evogenui(root: Path) -> Path:
    """The trained subset and the two external ones, with turns stored out of order as the files allow."""
    repository = root / "MAPS-research" / "EvoGenUI-Bench"
    tasks = repository / ps.EVOGENUI_TASKS_DIR
    for subset, name, turns in (
            ("interactive_ui_50", "Thin Lens Ray Bench", ["Build an interactive thin-lens\n ray lab.",
                                                          "Add a second lens.", "Show the focal points."]),
            ("presentation_ui_50", "CFO Margin War Room", ["Create a one-page margin war-room board.",
                                                           "Reframe it for the CFO."]),
            ("tool_grounded_action_ui_50", "Block Party", ["Build a block-party assignment board.",
                                                           "Send the assignments if the plan validates."])):
        (tasks / subset).mkdir(parents=True, exist_ok=True)
        (tasks / subset / f"{name}.json").write_text(json.dumps({"task_id": name, "turns": [
            {"turn": i + 1, "prompt": t} for i, t in reversed(list(enumerate(turns)))]}), encoding="utf-8")
    (tasks / "interactive_ui_50" / "Empty.json").write_text(json.dumps({"task_id": "empty"}), encoding="utf-8")
    return repository


def test_evogenui_trains_on_its_interactive_tasks_only(tmp_path: Path) -> None:
    repository = _evogenui(tmp_path)
    rows = list(ps.evogenui(repository))
    assert [(r.text, r.label, r.unit) for r in rows] == [
        ("Build an interactive thin-lens ray lab.", "ui", "Thin Lens Ray Bench")]
    assert rows[0].path == "bench/task_subsets/interactive_ui_50/Thin Lens Ray Bench.json"
    conversations = list(ps.evogenui_conversations(repository))
    assert [[t["content"] for t in c.turns] for c in conversations] == [
        ["Build an interactive thin-lens ray lab.", "Add a second lens.", "Show the focal points."]]
    assert all(c.label == "ui" and {t["role"] for t in c.turns} == {"user"} for c in conversations)
    found = ps.rows(tmp_path)  # the other two subsets are the external check (external_sources.py)
    assert [r["text"] for r in found] == ["Build an interactive thin-lens ray lab."]


def test_next_gen_ui_keeps_requests_that_name_a_view_over_the_users_data(tmp_path: Path) -> None:
    repository = tmp_path / "RedHat-UX" / "next-gen-ui-agent"
    k8s, general = (repository / folder for folder in ps.NEXT_GEN_UI_DATASETS[::-1])
    for folder in (k8s, general):
        folder.mkdir(parents=True)
    (k8s / "chart-3.json").write_text(json.dumps([
        {"id": "chart-1", "user_prompt": "Show pod status as a  pie chart", "backend_data": "{}"},
        {"id": "chart-2", "user_prompt": "What percentage of pods are running?", "backend_data": "{}"},
        {"id": "chart-3", "user_prompt": "Which nodes have the most available memory? Chart it"}]), encoding="utf-8")
    (general / "table-1.json").write_text(json.dumps([
        {"user_prompt": "Show me my subscriptions as table."}, {"user_prompt": "List my subscriptions."}]),
        encoding="utf-8")
    (general / "video-player-1.json").write_text(json.dumps([{"user_prompt": "Show me the trailer as a card"}]),
                                                  encoding="utf-8")
    rows = list(ps.next_gen_ui(repository))
    assert [(r.text, r.label) for r in rows] == [
        ("Show me my subscriptions as table.", "ui"),
        ("Show pod status as a pie chart", "ui"),
        ("Which nodes have the most available memory? Chart it", "ui")]
    # one data set's rephrasings share a split unit, so none of them lands in dev while another trains
    assert rows[1].unit == rows[2].unit == "tests/ai_eval_components/dataset_k8s/chart-3.json"
    found = ps.rows(tmp_path, (ps.NEXT_GEN_UI,))
    assert {r["license"] for r in found} == {"Apache-2.0"}
    assert {r["source"].split(":")[0] for r in found} == {"RedHat-UX/next-gen-ui-agent"}
    assert ps.rows(tmp_path) == []  # read and labelled, not in training


def test_personality_chat_keeps_small_talk_that_neither_points_back_nor_speaks_of_the_user(tmp_path: Path) -> None:
    repository = tmp_path / "sempjc" / "BotBuilder-PersonalityChat" / "CSharp" / "Datasets"
    repository.mkdir(parents=True)
    header = "Question\tAnswer\tSource\tMetadata\n"
    (repository / "qna_chitchat_the_friend.tsv").write_text(
        header + "How old are you?\tI don't really have an age.\tqna_chitchat_the_friend\teditorial:chitchat\n"
        "Ha\tGlad you're amused.\tqna_chitchat_the_friend\teditorial:chitchat\n"
        "That's not accurate\tOh, sorry.\tqna_chitchat_the_friend\teditorial:chitchat\n"
        "Yup, it is true\tGreat.\tqna_chitchat_the_friend\teditorial:chitchat\n", encoding="utf-8")
    (repository / "qna_chitchat_the_comic.tsv").write_text(
        header + "How old are you?\tOlder than dirt.\tqna_chitchat_the_comic\teditorial:chitchat\n"
        "I'm so hungry\tGo get a snack.\tqna_chitchat_the_comic\teditorial:chitchat\n"
        "My sincere thanks\tYou're welcome.\tqna_chitchat_the_comic\teditorial:chitchat\n"
        "Do you like computers?\tVery much.\tqna_chitchat_the_comic\teditorial:chitchat\n", encoding="utf-8")
    rows = list(ps.personality_chat(tmp_path / "sempjc" / "BotBuilder-PersonalityChat"))
    # one- and two-word reactions and turns that point back ("that's", "it") are follow-ups, left out; what
    # the user says of themselves ("I'm so hungry") is a personal agent's task, left out too
    assert sorted({r.text for r in rows}) == ["Do you like computers?", "How old are you?"]
    assert {r.label for r in rows} == {"chat"}
    found = ps.rows(tmp_path)
    assert sorted(r["text"] for r in found) == ["Do you like computers?", "How old are you?"]  # copies once
    assert {r["license"] for r in found} == {"MIT"}


def test_ui_registry_descriptions_are_the_blocks_and_charts_descriptions(tmp_path: Path) -> None:
    registry = tmp_path / "shadcn-ui" / "ui" / "apps" / "www" / "registry" / "new-york" / "block"
    registry.mkdir(parents=True)
    (registry / "sidebar-07.tsx").write_text(
        'import { AppSidebar } from "@/components/app-sidebar"\n\n'
        'export const description = "A sidebar that collapses to icons."\n', encoding="utf-8")
    (registry / "dashboard-05.tsx").write_text(
        'export const description =\n  "An orders dashboard with a sidebar navigation. The main area has a list of '
        'recent orders with a \\"filter\\" and export button."\n', encoding="utf-8")
    (registry / "chart.tsx").write_text('export const description = "A chart"\n', encoding="utf-8")  # too short
    rows = list(ps.ui_registry_descriptions(tmp_path / "shadcn-ui" / "ui"))
    assert {r.text for r in rows} == {
        "A sidebar that collapses to icons.",
        'An orders dashboard with a sidebar navigation. The main area has a list of recent orders with a "filter" '
        "and export button."}
    assert {r.label for r in rows} == {"ui"}
    assert {r.path for r in rows} == {"apps/www/registry/new-york/block/sidebar-07.tsx",
                                      "apps/www/registry/new-york/block/dashboard-05.tsx"}


def test_sysadmin_questions_keep_what_a_system_or_tool_does_and_leave_out_the_candidates_story(tmp_path: Path) -> None:
    book = tmp_path / "trimstray" / "test-your-sysadmin-skills"
    book.mkdir(parents=True)
    (book / "README.md").write_text(
        "- <b>What did you learn this week?</b>\n"  # the introduction's bullets are not summaries
        "<details>\n<summary><b>What does <code>kill</code> command do?</b></summary><br>\n"
        "Sends a signal to a process.\n</details>\n"
        "<summary><b>How do I <code>grep</code> recursively? Explain on several examples. ***</b></summary>\n"
        "<summary><b>What is your favorite shell and why?</b></summary><br>\n"
        "<summary><b>Tell me about the last outage you handled.</b></summary><br>\n"
        "<summary><b>What is the difference between a VLAN and a subnet?</b></summary><br>\n"
        "<summary><b>Why?</b></summary><br>\n", encoding="utf-8")
    rows = list(ps.sysadmin_questions(book))
    assert [r.text for r in rows] == [
        "What does kill command do?", "How do I grep recursively? Explain on several examples.",
        "What is the difference between a VLAN and a subnet?"]
    assert {r.label for r in rows} == {"code"} and len({r.unit for r in rows}) == 3
    found = ps.rows(tmp_path, (ps.SYSADMIN,))
    assert {r["license"] for r in found} == {"MIT"}
    assert {r["source"] for r in found} == {"trimstray/test-your-sysadmin-skills:README.md"}
    assert ps.rows(tmp_path) == []  # read and labelled, not in training
