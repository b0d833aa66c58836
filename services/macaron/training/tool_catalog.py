"""A catalog of personal-assistant tools, and the few offered with each agent prompt.

Why a catalog: the agent specialist learns to answer with a well-formed tool call when tools are
offered, but the public agent prompts come without their tools. Each prompt gets the catalog
tools closest to it in words (TF-IDF over name, description and keywords) plus one unrelated
tool, so the adapter sees realistic choices and learns to pick, not to always call one name.
"""

from __future__ import annotations

import functools
import random
from typing import Any


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str], keywords: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
        "keywords": keywords,
    }


_S = {"type": "string"}
_N = {"type": "number"}
_I = {"type": "integer"}

CATALOG: tuple[dict[str, Any], ...] = (
    _tool("get_weather", "Current weather or forecast for a city.", {"city": _S, "date": _S}, ["city"],
          "weather forecast rain sunny temperature degrees umbrella snow wind"),
    _tool("set_alarm", "Set an alarm at a time.", {"time": _S, "label": _S}, ["time"],
          "alarm wake me up morning clock"),
    _tool("set_timer", "Start a countdown timer.", {"minutes": _N}, ["minutes"], "timer countdown minutes seconds"),
    _tool("create_reminder", "Remind the user of something at a time.", {"text": _S, "time": _S}, ["text"],
          "remind reminder remember forget todo to-do list"),
    _tool("create_calendar_event", "Add an event or meeting to the calendar.",
          {"title": _S, "date": _S, "time": _S, "attendees": {"type": "array", "items": _S}}, ["title", "date"],
          "calendar meeting schedule appointment event book time"),
    _tool("send_message", "Send a text message or email to a contact.", {"to": _S, "body": _S}, ["to", "body"],
          "text message email send tell contact sms"),
    _tool("make_call", "Call a phone number or contact.", {"contact": _S}, ["contact"], "call phone dial ring"),
    _tool("play_music", "Play a song, artist, album or playlist.", {"query": _S}, ["query"],
          "play music song artist album playlist radio spotify volume"),
    _tool("get_account_balance", "Balance of one of the user's bank accounts.", {"account": _S}, ["account"],
          "balance bank account checking savings money how much"),
    _tool("transfer_money", "Move money between accounts or pay someone.",
          {"from_account": _S, "to_account": _S, "amount": _N}, ["from_account", "to_account", "amount"],
          "transfer pay send money payment bill rent"),
    _tool("get_card_info", "Details of a credit card: limit, rewards points, due date, APR.",
          {"card": _S, "field": {"type": "string", "enum": ["limit", "points", "due_date", "apr", "status"]}},
          ["card", "field"], "credit card limit points rewards apr interest due payment declined"),
    _tool("report_lost_card", "Freeze or replace a lost or stolen card.", {"card": _S}, ["card"],
          "lost stolen card freeze block replace fraud"),
    _tool("book_restaurant", "Reserve a restaurant table.", {"restaurant": _S, "time": _S, "party_size": _I},
          ["restaurant", "time"], "restaurant table reservation dinner lunch book reserve"),
    _tool("book_flight", "Find or book a flight.", {"origin": _S, "destination": _S, "date": _S},
          ["origin", "destination"], "flight fly plane airline ticket travel trip book"),
    _tool("get_directions", "Route and travel time between two places.", {"origin": _S, "destination": _S},
          ["destination"], "directions route traffic drive how long get to map"),
    _tool("order_ride", "Order a taxi or ride share.", {"pickup": _S, "destination": _S}, ["destination"],
          "uber lyft taxi ride car pick me up"),
    _tool("translate_text", "Translate text into another language.", {"text": _S, "target_language": _S},
          ["text", "target_language"], "translate translation language say in spanish french"),
    _tool("convert_currency", "Convert an amount between currencies.", {"amount": _N, "from": _S, "to": _S},
          ["amount", "from", "to"], "exchange rate currency convert dollars euros"),
    _tool("search_web", "Search the web and return the top results.", {"query": _S}, ["query"],
          "search look up find google information"),
    _tool("get_news", "Latest news headlines on a topic.", {"topic": _S}, [], "news headlines today"),
    _tool("add_to_shopping_list", "Add an item to the shopping list.", {"item": _S, "quantity": _I}, ["item"],
          "shopping list grocery buy add item"),
    _tool("control_smart_home", "Turn a smart-home device on or off or set its level.",
          {"device": _S, "action": {"type": "string", "enum": ["on", "off", "set"]}, "value": _N},
          ["device", "action"], "lights thermostat smart home turn on off device car start lock"),
    _tool("track_package", "Where an order or package is.", {"tracking_id": _S}, ["tracking_id"],
          "package order delivery shipping track where is"),
    _tool("get_stock_price", "Latest price of a stock or fund.", {"symbol": _S}, ["symbol"],
          "stock price share market ticker invest"),
)


def openai_tool(entry: dict[str, Any]) -> dict[str, Any]:
    """The catalog entry as an OpenAI `tools` item (without our keywords)."""
    return {"type": entry["type"], "function": entry["function"]}


@functools.lru_cache(maxsize=1)
def _index() -> tuple[Any, Any]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = [
        f"{t['function']['name'].replace('_', ' ')} {t['function']['description']} {t['keywords']}" for t in CATALOG
    ]
    vectorizer = TfidfVectorizer(ngram_range=(1, 1), sublinear_tf=True).fit(docs)
    return vectorizer, vectorizer.transform(docs)


def tools_for(prompt: str, seed: int, closest: int = 3) -> list[dict[str, Any]]:
    """The `closest` catalog tools nearest to `prompt`, plus one other, in a seeded order."""
    vectorizer, matrix = _index()
    scores = (matrix @ vectorizer.transform([prompt]).T).toarray().ravel()
    ranked = sorted(range(len(CATALOG)), key=lambda i: (-scores[i], i))
    rng = random.Random(seed)
    chosen = ranked[:closest] + [rng.choice(ranked[closest:])]
    rng.shuffle(chosen)
    return [openai_tool(CATALOG[i]) for i in chosen]
