"""The built-in text the tiny tokenizer is trained on.

Written for this project (no downloads): a few KB of English prose, code, JSON, shell,
multilingual lines and chat transcripts, so the merges it learns look like the traffic the
four specialists see. Byte-level BPE round-trips any UTF-8 whatever this text holds; the
corpus only decides which strings get short encodings.
"""

from __future__ import annotations

import json

PROSE = """\
Macaron Serve holds one frozen base model in memory and puts four small LoRA specialists on top of it.
A lightweight router reads each request and decides which specialist should answer: chat, agent, code or ui.
The chat specialist is the entry point and the fallback. It handles general conversation, small talk,
questions about the weather, history, science, cooking, travel and music, and it can act as a judge
when the router is not sure which domain a request belongs to.
The agent specialist plans personal tasks and calls tools: it books a table, sends an email, reads the
calendar, sets a reminder, searches the web or checks the price of a train ticket.
The code specialist reads and writes programs, explains a stack trace, reviews a pull request, writes a
unit test, fixes a failing build and suggests a cleaner name for a function.
The ui specialist describes user interfaces as JSON that must validate against a schema: a form with
fields, a card with a title and an image, a list of buttons, a chart with a legend.
Every decision carries a reason and a confidence, and every hop propagates its deadline and trace.
When traffic grows, each specialist scales on its own; the base model is loaded once per replica.
A new adapter version is loaded next to the old one, takes a small canary share of the traffic, and is
promoted or rolled back without a restart and without dropping a request.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
It was a bright cold day in April, and the clocks were striking thirteen.
Please summarize the following paragraph in two sentences. What is the capital of France? Paris.
How many minutes are there in a day? There are 1440 minutes in a day, because 24 times 60 is 1440.
Thank you! You're welcome. Could you help me with something else? Of course, what do you need?
I would like to book a flight from Berlin to Lisbon next Tuesday morning, preferably before ten o'clock.
The meeting has been moved to Thursday at 3:30 pm; please update the invitation and notify the team.
Water boils at 100 degrees Celsius at sea level. The speed of light is about 299,792 kilometres per second.
Yesterday we released version 2.4.1, which fixes a memory leak, improves latency by 12% and adds retries.
"""

CODE = '''\
import json
import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Request:
    """One chat request as the router sees it."""

    request_id: str
    messages: list[dict[str, str]] = field(default_factory=list)
    max_tokens: int = 256
    temperature: float = 0.0

    def last_user_message(self) -> str | None:
        for message in reversed(self.messages):
            if message["role"] == "user":
                return message["content"]
        return None


def load_config(path: str | os.PathLike[str]) -> dict:
    """Reads a JSON config file and returns its content."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def fibonacci(n: int) -> list[int]:
    values = [0, 1]
    while len(values) < n:
        values.append(values[-1] + values[-2])
    return values[:n]


class LRUCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        if key not in self.items:
            return None
        value = self.items.pop(key)
        self.items[key] = value
        return value

    def put(self, key: str, value: bytes) -> None:
        self.items.pop(key, None)
        self.items[key] = value
        if len(self.items) > self.capacity:
            oldest = next(iter(self.items))
            del self.items[oldest]


async def fetch_all(client, urls: list[str]) -> list[int]:
    results = []
    for url in urls:
        response = await client.get(url, timeout=10.0)
        response.raise_for_status()
        results.append(response.status_code)
    return results


def test_fibonacci() -> None:
    assert fibonacci(5) == [0, 1, 1, 2, 3]
    assert fibonacci(1) == [0]


if __name__ == "__main__":
    print(fibonacci(10))
'''

OTHER_CODE = """\
function debounce(fn, wait = 200) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), wait);
  };
}

export const sum = (values) => values.reduce((total, value) => total + value, 0);

const res = await fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify(payload) });
if (!res.ok) throw new Error(`request failed: ${res.status}`);

SELECT user_id, COUNT(*) AS orders FROM orders WHERE created_at > '2024-01-01' GROUP BY user_id ORDER BY orders DESC LIMIT 10;

fn main() {
    let words = vec!["alpha", "beta", "gamma"];
    for (i, word) in words.iter().enumerate() {
        println!("{}: {}", i, word);
    }
}

$ git status
$ git checkout -b fix/router-timeout
$ pip install -e ".[dev]" && pytest -q tests/
$ curl -s http://localhost:8080/v1/models | jq '.data[].id'
$ docker run --rm -p 30000:30000 -e MODEL_PATH=/models/base image:latest
$ kubectl get pods -n macaron -o wide
Traceback (most recent call last):
  File "app.py", line 42, in <module>
    main()
KeyError: 'content'
"""

MULTILINGUAL = """\
Bonjour, comment ça va ? Très bien, merci. Où est la gare ? C'est à côté du musée.
Guten Tag! Können Sie mir helfen? Die Straße ist gesperrt, wir müssen einen Umweg fahren.
¿Dónde está la biblioteca? Está en la plaza, cerca del café. ¡Qué día tan bonito!
Olá, tudo bem? Obrigado pela ajuda. Até amanhã!
你好，今天天气很好。我们去公园散步吧。请问火车站在哪里？
こんにちは。お元気ですか。ありがとうございます。東京は大きい都市です。
안녕하세요. 만나서 반갑습니다. 감사합니다.
Привет! Как дела? Спасибо, всё хорошо.
مرحبا، كيف حالك؟ شكرا جزيلا.
नमस्ते, आप कैसे हैं?
Emoji: 😀 😂 🎉 👍 ❤️ 🚀 🍰 🌍 ✅ ❌ ⚠️ 🔥 — café, naïve, résumé, coöperate, ½, €100, £5, ¥300, ±3°C, ∑x², √2 ≈ 1.414.
Tabs\tand\tnewlines\nin a string, a bell \a, a null byte \\0 and a carriage return \r\n are all bytes too.
"""

_JSON_SAMPLES: list[object] = [
    {"type": "card", "title": "Weather in Paris", "children": [{"type": "text", "value": "18°C, light rain"}]},
    {
        "type": "form",
        "title": "Book a table",
        "fields": [
            {"name": "date", "type": "date", "required": True},
            {"name": "guests", "type": "number", "minimum": 1, "maximum": 12},
            {"name": "notes", "type": "string", "maxLength": 200},
        ],
        "submit": {"label": "Book"},
    },
    {"type": "list", "items": [{"label": "Inbox", "count": 12}, {"label": "Sent", "count": 3}]},
    {"type": "button", "label": "Confirm", "variant": "primary", "disabled": False},
    {
        "id": "req-42",
        "model": "macaron-auto",
        "choices": [{"index": 0, "finish_reason": "stop"}],
        "usage": None,
    },
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name"],
        "additionalProperties": False,
    },
]

TOOLS: list[dict[str, object]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_email",
            "description": "Send an email to one recipient.",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
                "required": ["to", "subject", "body"],
            },
        },
    },
]

_CONVERSATIONS: list[list[dict[str, object]]] = [
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hi! Can you tell me a fun fact about octopuses?"},
        {"role": "assistant", "content": "Sure! An octopus has three hearts and blue blood."},
    ],
    [
        {"role": "user", "content": "What's the weather like in Tokyo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}],
        },
        {"role": "tool", "content": '{"temperature": 21, "condition": "sunny"}'},
        {"role": "assistant", "content": "It is sunny in Tokyo and 21 degrees."},
    ],
    [
        {"role": "system", "content": "You are a senior Python engineer."},
        {"role": "user", "content": "Write a function that reverses a string."},
        {"role": "assistant", "content": "```python\ndef reverse(text: str) -> str:\n    return text[::-1]\n```"},
    ],
    [
        {"role": "user", "content": "Make a login form with an email field and a password field."},
        {
            "role": "assistant",
            "content": '{"type": "form", "fields": [{"name": "email", "type": "email"}, '
            '{"name": "password", "type": "password"}], "submit": {"label": "Log in"}}',
        },
    ],
]


def _chatml(messages: list[dict[str, object]]) -> str:
    """Renders a conversation in the template's ChatML shape (plain Python, no Jinja needed)."""
    parts: list[str] = []
    for message in messages:
        role = str(message["role"])
        content = str(message.get("content") or "")
        if role == "tool":
            parts.append(f"<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n")
            continue
        for call in message.get("tool_calls") or []:  # type: ignore[union-attr]
            function = call["function"]
            payload = json.dumps({"name": function["name"], "arguments": function["arguments"]}, ensure_ascii=False)
            content += f"\n<tool_call>\n{payload}\n</tool_call>"
        parts.append(f"<|im_start|>{role}\n{content.strip()}<|im_end|>\n")
    return "".join(parts)


def training_corpus() -> list[str]:
    """The texts the tokenizer trainer reads, in a fixed order (the order is part of the recipe)."""
    texts = [PROSE, CODE, OTHER_CODE, MULTILINGUAL]
    texts += [json.dumps(sample, ensure_ascii=False) for sample in _JSON_SAMPLES]
    texts += [json.dumps(sample, indent=2, ensure_ascii=False) for sample in _JSON_SAMPLES]
    texts += [json.dumps(tool, ensure_ascii=False) for tool in TOOLS]
    texts += [_chatml(conversation) for conversation in _CONVERSATIONS]
    return texts
