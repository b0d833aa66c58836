"""The playground page in a real browser: headless system Chromium driven by Playwright, against `macaron serve`.

Nothing downloads a browser: Playwright launches the Debian `chromium` binary (`executable_path`).
Without it the tests skip and say why (scripts/test installs it when it runs as root or in CI).
Each step leaves a screenshot under `<pytest basetemp>/artifacts/playground/` (or under
$MACARON_TEST_ARTIFACTS when set), printed at the end of the run.

The stack runs the tiny random model, so `ui` answers are pinned with a `response_format` whose
schema admits one exact A2UI form (typed into the page's request options, as a person could):
the real path (page → gateway → router → ui specialist → engine's constrained decoding → page →
A2UI renderer) is exercised, and the rendered components can be looked for in the DOM.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from macaron.gateway.playground import renderer_built

from .conftest import API_KEY, ARTIFACT_DIRS, Stack

ANSWER_TIMEOUT_MS = 30_000
BASIC_CATALOG = "https://a2ui.org/specification/v0_9/catalogs/basic/catalog.json"
SIGNUP_FORM: list[dict[str, Any]] = [
    {"version": "v0.9", "createSurface": {"surfaceId": "main", "catalogId": BASIC_CATALOG}},
    {"version": "v0.9", "updateComponents": {"surfaceId": "main", "components": [
        {"id": "root", "component": "Column", "children": ["title", "name", "email", "submit"]},
        {"id": "title", "component": "Text", "text": "Sign up", "variant": "h2"},
        {"id": "name", "component": "TextField", "label": "Name", "value": {"path": "/form/name"}},
        {"id": "email", "component": "TextField", "label": "Email", "value": {"path": "/form/email"}},
        {"id": "submit", "component": "Button", "child": "submit_label", "variant": "primary",
         "action": {"event": {"name": "submit", "context": {"name": {"path": "/form/name"}}}}},
        {"id": "submit_label", "component": "Text", "text": "Create account"},
    ]}},
    {"version": "v0.9", "updateDataModel": {"surfaceId": "main", "path": "/form", "value": {"name": "", "email": ""}}},
]
GREETING: list[dict[str, Any]] = [
    {"version": "v0.9", "createSurface": {"surfaceId": "main", "catalogId": BASIC_CATALOG}},
    {"version": "v0.9", "updateComponents": {"surfaceId": "main", "components": [
        {"id": "root", "component": "Text", "text": "Hello"}]}},
]
NOT_A2UI_V09: list[dict[str, Any]] = [{"version": "v0.8", "beginRendering": {"surfaceId": "main", "root": "root"}}]


def pinned_schema(value: Any) -> dict[str, Any]:
    """A JSON schema that admits exactly `value` (key order included), so constrained decoding writes it."""
    if isinstance(value, dict):
        return {"type": "object", "properties": {k: pinned_schema(v) for k, v in value.items()},
                "required": list(value), "additionalProperties": False}
    if isinstance(value, list):
        return {"type": "array", "prefixItems": [pinned_schema(v) for v in value], "items": False,
                "minItems": len(value), "maxItems": len(value)}
    return {"enum": [value]}


def pinned_options(value: Any, max_tokens: int = 700) -> str:
    return json.dumps({"max_tokens": max_tokens, "response_format": {
        "type": "json_schema", "json_schema": {"name": "pinned", "schema": pinned_schema(value)}}})


def system_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


# decided before any fixture starts (the session's `macaron serve` would start first otherwise)
pytestmark = pytest.mark.skipif(
    system_chromium() is None,
    reason="no system Chromium (Debian package `chromium`): scripts/test installs it when run as root or in CI",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = system_chromium()
    assert path is not None
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # --no-sandbox: CI containers run as root, where Chromium's sandbox refuses to start
        chromium = pw.chromium.launch(executable_path=path, headless=True, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Path:
    base = Path(os.environ["MACARON_TEST_ARTIFACTS"]) if os.environ.get("MACARON_TEST_ARTIFACTS") \
        else tmp_path_factory.getbasetemp() / "artifacts"
    folder = base / "playground"
    folder.mkdir(parents=True, exist_ok=True)
    pytestconfig.stash.setdefault(ARTIFACT_DIRS, []).append(str(folder))
    return folder


@contextlib.contextmanager
def open_page(browser: Any, stack: Stack, *, without_renderer: bool = False) -> Iterator[Any]:
    """The playground in a fresh browser context; fails the test on any uncaught error in the page."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    if without_renderer:  # as on a machine where the set-up had no npm: the bundle's URL is a 404
        tab.route("**/playground/renderer/**", lambda route: route.fulfill(status=404, body="not built"))
    tab.goto(stack.gateway_url + "/")
    tab.wait_for_selector("body[data-ready=true]")
    try:
        yield tab
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture
def page(browser: Any, stack: Stack) -> Iterator[Any]:
    with open_page(browser, stack) as tab:
        yield tab


def ask(page: Any, prompt: str, *, model: str, key: str = API_KEY, options: str | None = None) -> Any:
    """Types the key, model, options and prompt as a person would, sends, and returns the answer's element."""
    page.fill("#api-key", key)
    page.dispatch_event("#api-key", "change")
    page.select_option("#model", model)
    if options is not None:
        page.click("#options-box summary")
        page.fill("#options", options)
    before = page.locator(".turn.assistant").count()
    page.fill("#prompt", prompt)
    page.click("#send")
    turn = page.locator(".turn.assistant").nth(before)
    page.wait_for_function(
        f"document.querySelectorAll('.turn.assistant')[{before}]?.dataset.state !== 'streaming'",
        timeout=ANSWER_TIMEOUT_MS)
    return turn


def test_a_message_is_streamed_and_tagged_with_its_route(page: Any, artifacts: Path) -> None:
    session = page.text_content("#session-id")
    assert session and session.startswith("pg-")
    with page.expect_request("**/v1/chat/completions") as sent:
        turn = ask(page, "Hello! What can you do?", model="macaron-auto", options='{"max_tokens": 24}')
    request = sent.value
    assert request.headers["x-session-id"] == session  # the session id that keeps the route sticky
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert json.loads(request.post_data)["stream"] is True
    assert turn.get_attribute("data-state") == "done", turn.inner_text()
    assert int(turn.get_attribute("data-deltas") or 0) >= 2, "the answer did not arrive in several streamed pieces"
    assert turn.locator(".content").inner_text().strip()
    assert turn.locator(".tag[data-tag=specialist]").inner_text().split()[-1] in {"chat", "agent", "code", "ui"}
    assert turn.locator(".tag[data-tag=reason]").inner_text().split()[-1] not in {"?", ""}
    assert turn.locator(".tag[data-tag=ttft]").inner_text().endswith(" ms")
    route_ms = turn.locator(".tag[data-tag=route-ms]").inner_text().split()[-2]
    assert float(route_ms) > 0, "the router's routing time did not reach the page"
    assert turn.locator(".tag[data-tag=tokens]").count() == 1
    # the live panel counts it (polled, and refreshed after each answer)
    page.wait_for_selector("#route-mix .bar-row")
    page.wait_for_function("!document.querySelector('[data-stat=route-p50] b').textContent.startsWith('–')")
    page.screenshot(path=str(artifacts / "01-streamed-and-tagged.png"), full_page=True)
    # a new session forgets the conversation and takes a new id
    page.click("#new-session")
    assert page.text_content("#session-id") != session
    assert page.locator(".turn").count() == 0


@pytest.mark.skipif(not renderer_built(), reason="the A2UI renderer is not built (scripts/bootstrap.sh needs node and npm)")
def test_a_ui_form_is_rendered_by_the_a2ui_renderer_next_to_its_json(page: Any, artifacts: Path) -> None:
    turn = ask(page, "A sign-up form with name and email", model="macaron-ui", options=pinned_options(SIGNUP_FORM))
    assert turn.get_attribute("data-state") == "done", turn.inner_text()
    assert turn.locator(".tag[data-tag=specialist]").inner_text().split()[-1] == "ui"
    assert turn.get_attribute("data-a2ui") == "rendered", turn.inner_text()
    # rendered live: the surface was drawn while the answer still streamed (its last message came later)
    assert int(turn.get_attribute("data-live-renders") or 0) >= 1
    view = turn.locator(".a2ui-view")
    view.locator("a2ui-surface").wait_for()
    # Playwright's CSS engine pierces the renderer's shadow roots: these are the rendered components
    assert view.locator("a2ui-basic-textfield").count() == 2
    assert view.locator("a2ui-basic-button").count() == 1
    assert view.locator("input").count() == 2
    assert "Create account" in view.locator("a2ui-basic-button").inner_text()
    assert view.get_by_text("Sign up").count() == 1
    raw = json.loads(turn.locator(".a2ui-raw").inner_text())
    assert raw == SIGNUP_FORM
    # live components: typed input reaches the data model, and the button sends it in its action
    view.locator("input").first.fill("Ada")
    view.get_by_role("button", name="Create account").click()
    action = turn.locator(".a2ui-action[data-action=submit]")
    action.wait_for()
    sent = json.loads(action.locator("code").inner_text())
    assert sent["name"] == "submit" and sent["surfaceId"] == "main" and sent["context"] == {"name": "Ada"}
    page.screenshot(path=str(artifacts / "02-ui-form-rendered.png"), full_page=True)


@pytest.mark.skipif(not renderer_built(), reason="the A2UI renderer is not built (scripts/bootstrap.sh needs node and npm)")
def test_an_invalid_ui_description_shows_a_clear_message(page: Any, artifacts: Path) -> None:
    turn = ask(page, "An old-style form", model="macaron-ui", options=pinned_options(NOT_A2UI_V09, 120))
    page.screenshot(path=str(artifacts / "03-ui-invalid.png"), full_page=True)
    assert turn.get_attribute("data-a2ui") == "invalid", turn.inner_text()
    message = turn.locator(".a2ui-invalid").inner_text()
    assert "Not a valid A2UI description" in message and "v0.9" in message
    assert json.loads(turn.locator(".a2ui-raw").inner_text()) == NOT_A2UI_V09


def test_agent_tool_calls_are_shown_as_calls(page: Any, artifacts: Path) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}]
    options = json.dumps({"max_tokens": 64, "tools": tools, "tool_choice": "required"})
    turn = ask(page, "Weather in Oslo?", model="macaron-agent", options=options)
    page.screenshot(path=str(artifacts / "04-agent-tool-call.png"), full_page=True)
    assert turn.get_attribute("data-state") == "done", turn.inner_text()
    call = turn.locator(".tool-call[data-tool=get_weather]")
    assert call.count() == 1
    assert call.locator("table.args th").inner_text() == "city"


def test_a_bad_api_key_shows_the_error_message(page: Any, artifacts: Path) -> None:
    turn = ask(page, "Hello?", model="macaron-chat", key="mk-not-a-real-key")
    page.screenshot(path=str(artifacts / "05-bad-api-key.png"), full_page=True)
    assert turn.get_attribute("data-state") == "error"
    error = turn.locator(".error").inner_text()
    assert "401" in error and "invalid API key" in error
    page.wait_for_selector("#stats-error:not([hidden])")
    assert "invalid API key" in page.inner_text("#stats-error")


def test_without_the_renderer_the_page_says_so_and_still_shows_the_json(browser: Any, stack: Stack,
                                                                         artifacts: Path) -> None:
    with open_page(browser, stack, without_renderer=True) as tab:
        note = tab.locator("#renderer-note")
        assert note.is_visible() and "renderer is not installed" in note.inner_text()
        turn = ask(tab, "Say hello", model="macaron-ui", options=pinned_options(GREETING, 200))
        tab.screenshot(path=str(artifacts / "06-no-renderer.png"), full_page=True)
        assert turn.get_attribute("data-a2ui") == "unrendered"
        assert json.loads(turn.locator(".a2ui-raw").inner_text()) == GREETING
        assert turn.locator("a2ui-surface").count() == 0
