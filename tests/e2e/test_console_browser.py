"""The memory console in a real browser: Playwright driving Debian's `chromium` (CI installs it,
.ci/run; Playwright downloads nothing) against the real gateway and store.

With CONSOLE_SCREENSHOTS=<dir> set, the tests also save docs/console.md's screenshots there
(`CONSOLE_SCREENSHOTS=docs/console pytest tests/e2e/test_console_browser.py`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.console import ADMIN_KEY, chat, console_config
from tests.support.gateway import running_gateway
from tests.integration.test_memory_erase import converse

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                "(CI installs it: .ci/run)")

ERIN, MEI = "erin-7Q", "mei-3Z"
XSS = '<script>window.__owned = 1</script><img src=x onerror="window.__owned = 2">'
FACT_LINE = "- user location: Quillonville (as of"
SHOTS = os.environ.get("CONSOLE_SCREENSHOTS")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 800}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


@pytest.fixture
def url(redis_url):
    with running_gateway(console_config(redis_url, facts_k=5)) as base:
        converse(base, "acme", ERIN, "chat-1", [
            "My name is Zorblax Canary.", "I live in Quillonville.", "I love green tea."])
        converse(base, "acme", MEI, "chat-zh", ["周末我常去西湖散步，那里的风景很美。",
                                                "你能推荐一家杭州的茶馆吗？"])
        yield base


def forwarded(base: str, conversation: str, question: str) -> str:
    """The memory block the model was sent for `question` (fake/echo-messages echoes it)."""
    response = chat(base, ERIN, conversation, [{"role": "user", "content": question}],
                    model="messages")
    messages = json.loads(response.json()["choices"][0]["message"]["content"])
    return "\n".join(m["content"] for m in messages if m["role"] == "system")


def sign_in(page, base: str) -> None:
    page.goto(base + "/console")
    assert page.url.endswith("/console/login")
    page.fill("input[name=key]", ADMIN_KEY)
    page.click("button[type=submit]")
    page.wait_for_url(base + "/console")


def shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"))


def open_conversation(page, base: str, conversation: str) -> None:
    page.goto(base + "/console/t/acme")
    page.fill("input[name=conversation]", conversation)
    page.click("form.search button")
    page.click(f"#found a:text-is('{conversation}')")


def test_sign_in_find_a_conversation_and_see_what_the_model_was_sent(page, url):
    assert FACT_LINE in forwarded(url, "chat-2", "user location?")
    page.goto(url + "/console/login")
    shot(page, "login")
    sign_in(page, url)
    assert page.locator("table a", has_text="acme").is_visible()
    open_conversation(page, url, "chat-2")
    assert page.locator("h1").inner_text() == "Conversation chat-2"
    recalled = page.locator("table.recalled tr", has_text="user location: Quillonville")
    assert recalled.locator("td").nth(0).inner_text() == "fact"
    assert float(recalled.locator("td").nth(1).inner_text()) > 0
    original = int(page.locator("#tokens-original").inner_text())
    assert int(page.locator("#tokens-forwarded").inner_text()) > original  # memory added
    shot(page, "conversation")
    page.goto(url + "/console/t/acme/requests")
    assert page.locator("table.requests tr", has_text="chat-2").count() == 1
    assert page.locator("figure.chart polyline.forwarded").count() == 1
    shot(page, "requests")


def test_chinese_text_renders_in_the_transcript(page, url):
    sign_in(page, url)
    page.goto(f"{url}/console/t/acme/u/{MEI}/c/chat-zh")
    contents = page.locator(".message.user .content").all_inner_texts()
    assert contents == ["周末我常去西湖散步，那里的风景很美。", "你能推荐一家杭州的茶馆吗？"]
    assert page.evaluate("document.characterSet") == "UTF-8"
    shot(page, "conversation-zh")
    page.goto(f"{url}/console/t/acme")
    shot(page, "tenant")


def test_a_deleted_fact_is_gone_from_the_next_forwarded_prompt(page, url):
    sign_in(page, url)
    page.goto(f"{url}/console/t/acme/u/{ERIN}")
    row = page.locator("tr[data-fact='user_location']")
    assert "Quillonville" in row.locator("td.value").inner_text()
    assert "I live in Quillonville." in row.locator("td.sources").inner_text()
    shot(page, "user")
    page.once("dialog", lambda dialog: dialog.accept())  # "Delete this fact?"
    row.locator("button.danger").click()
    page.wait_for_load_state()
    assert page.locator("tr[data-fact='user_location']").count() == 0
    assert page.locator("tr[data-fact='user_name']").count() == 1
    assert FACT_LINE not in forwarded(url, "chat-3", "user location?")


def test_erase_a_user_after_typing_its_id(page, url):
    sign_in(page, url)
    page.goto(f"{url}/console/t/acme/u/{ERIN}")
    page.fill("form.danger-zone input[name=confirm]", ERIN)
    page.click("form.danger-zone button")
    page.wait_for_url(url + "/console/t/acme?erased=1")
    assert page.locator("ul.users", has_text=ERIN).count() == 0
    assert page.locator("ul.users", has_text=MEI).count() == 1
    page.fill("input[name=conversation]", "chat-1")
    page.click("form.search button")
    assert "No user of acme has a conversation with this id." in page.locator(
        "#found").inner_text()


def test_a_script_in_a_transcript_is_shown_as_text_and_never_runs(page, url):
    converse(url, "acme", ERIN, "chat-xss", [f"Look at this: {XSS}"])
    sign_in(page, url)
    page.goto(f"{url}/console/t/acme/u/{ERIN}/c/chat-xss")
    first = page.locator(".message.user .content").first
    assert first.inner_text() == f"Look at this: {XSS}"
    assert page.evaluate("window.__owned") is None
    assert page.locator(".transcript script, .transcript img").count() == 0
