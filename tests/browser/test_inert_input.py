"""Everything a user supplies is inert text, in a real browser: a Markdown/HTML payload as every deep-link
parameter (one URL per page holds all its parameters), in the packing lengths box, in a pasted vLLM error line
and in the sign-in name builds no link and no image to the attacker's host, and the browser asks no host but
the app's for anything (every other request is aborted and recorded)."""

from __future__ import annotations

from urllib.parse import urlencode, urlparse

import pytest

from lessons.links import SPECS
from tests.browser.helpers import error_texts, press_and_wait, wait_for_app, wait_for_runs

pytestmark = pytest.mark.browser

EVIL = "evil.example"
PAYLOAD = (
    f"[click](https://{EVIL}/x) ![i](https://{EVIL}/i.png) <img src=https://{EVIL}/h.png> "
    f"https://{EVIL}/auto :material/warning: $x^2$ ``` `` ` **b** \u202e"
)
# every URL-bearing attribute the page built that points at the attacker's host, or an image from any other host
FOREIGN_JS = """(evil) => {
  const out = [];
  for (const el of document.querySelectorAll('a[href], img, image, [src], [srcset], [href], [style*="url("]')) {
    for (const attr of ['href', 'src', 'srcset', 'xlink:href', 'style']) {
      const v = el.getAttribute(attr);
      if (!v) continue;
      const img = el.tagName === 'IMG' || el.tagName.toLowerCase() === 'image';
      let foreign = false;
      try { foreign = new URL(v, location.href).origin !== location.origin; } catch (e) { foreign = false; }
      if (v.includes(evil) || (img && attr !== 'style' && foreign && !v.startsWith('data:'))) {
        out.push(el.tagName + ' ' + attr + '=' + v);
      }
    }
  }
  return out;
}"""
ALERT_LINKS_JS = """() => Array.from(document.querySelectorAll('[data-testid^="stAlertContent"] a, '
  + '[data-testid^="stAlertContent"] img, [data-testid^="stAlertContent"] .katex, '
  + '[data-testid^="stAlertContent"] [data-testid="stIconMaterial"]')).map(e => e.outerHTML.slice(0, 200))"""


@pytest.fixture
def guarded(page, app_url):
    """The `page` fixture with every request to another origin aborted and recorded in ``page.foreign``."""
    origin = "{0.scheme}://{0.netloc}".format(urlparse(app_url))
    foreign: list[str] = []

    def route(r):
        url = r.request.url
        if url.startswith(origin) or url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            foreign.append(url)  # none tolerated: the app's favicon is a local file (app.py)
            r.abort()

    page.context.route("**/*", route)
    page.foreign = foreign
    yield page
    assert foreign == [], foreign  # checked again after each test: no request ever left the app's origin


def assert_inert(page, alerts: int | None = None) -> None:
    """No attacker-host link or image anywhere, no link, image, LaTeX or icon built inside an alert body."""
    assert page.evaluate(FOREIGN_JS, EVIL) == []
    assert page.evaluate(ALERT_LINKS_JS) == []
    assert page.foreign == []
    if alerts is not None:
        shown = page.locator('[data-testid="stAlertContentWarning"]', has_text="Link parameter")
        assert shown.count() == alerts
        # the raw value is on screen to read, as code
        assert shown.first.locator("code", has_text=f"https://{EVIL}/x").count() == 1


def open_view(page, path: str, query: dict[str, str]) -> None:
    """Go to the page (a new document: its finished-run counter starts at 0) and wait for the run to finish."""
    page.goto(f"/{path}?{urlencode(query)}" if query else f"/{path}")
    wait_for_runs(page, 0, timeout_ms=120_000)
    wait_for_app(page, 120_000)


@pytest.mark.parametrize("page_id", list(SPECS))
def test_a_payload_in_every_link_parameter_is_shown_as_text(guarded, page_id):
    spec = SPECS[page_id]
    open_view(guarded, spec.url_path, {name: PAYLOAD for name in spec.names})
    guarded.locator('[data-testid="stAlertContentWarning"]', has_text="Link parameter").first.wait_for()
    assert_inert(guarded, alerts=len(spec.names))
    assert error_texts(guarded) == []


def test_odd_numbers_in_a_link_are_refused_with_a_visible_value(guarded):
    open_view(guarded, "paged_attention", {"block_size": "\uff16\uff14", "max_context": "4096\u200f"})
    warnings = guarded.locator('[data-testid="stAlertContentWarning"]', has_text="Link parameter")
    warnings.first.wait_for()
    texts = warnings.all_inner_texts()
    assert len(texts) == 2 and any("\\u200f" in t for t in texts), texts  # the hidden mark shown, escaped
    assert_inert(guarded)


def test_a_payload_in_the_lengths_box_is_shown_as_text(guarded):
    open_view(guarded, "packing", {})
    box = guarded.get_by_label("Request lengths in tokens (comma-separated)", exact=True)
    box.fill(f"5, {PAYLOAD}")
    press_and_wait(guarded, box, "Enter", timeout_ms=120_000)
    alert = guarded.locator('[data-testid="stAlertContentError"]')
    alert.first.wait_for()
    assert alert.first.locator("code", has_text=f"https://{EVIL}/x").count() == 1, alert.first.inner_text()
    assert_inert(guarded)


def test_a_payload_in_a_pasted_error_line_is_shown_as_text(guarded):
    open_view(guarded, "diagnosis", {})
    box = guarded.get_by_label("Your vLLM start-up log", exact=True)
    box.scroll_into_view_if_needed()
    box.fill(
        f"ValueError: The model's max seq len (40000) {PAYLOAD} is larger than the maximum number of tokens that "
        "can be stored in KV cache (23648).\nINFO GPU KV cache size: 99999999999999 tokens"
    )
    press_and_wait(guarded, box, "Control+Enter", timeout_ms=120_000)
    guarded.get_by_text("Your log reports").first.wait_for()
    guarded.get_by_text("looks wrong").first.wait_for()  # 10^14 tokens: a note, not a crash
    assert_inert(guarded)
    assert error_texts(guarded) == []


def test_a_payload_typed_as_the_sign_in_name_is_refused_as_text(guarded):
    sidebar = guarded.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("Save my progress").click()
    for name in (f"![i](https://{EVIL}/i.png)", f"[x](https://{EVIL}) $x$", ":material/warning: <b>"):
        sidebar.get_by_label("Your name").fill(name)
        sidebar.get_by_label("Class code").fill("room-1")
        before = guarded.evaluate("window.__kvFinished")
        sidebar.get_by_role("button", name="Sign in").click()
        wait_for_runs(guarded, before)
        sidebar.locator('[data-testid="stAlertContentError"]').first.wait_for()
        assert_inert(guarded)


def test_a_payload_in_a_pasted_config_json_is_shown_as_text(guarded):
    open_view(guarded, "gqa", {})
    box = guarded.get_by_label("Your model's config.json", exact=False)
    box.scroll_into_view_if_needed()
    box.fill(
        '{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": "' + PAYLOAD.replace('"', "") + '"}'
    )
    press_and_wait(guarded, box, "Control+Enter", timeout_ms=120_000)
    alert = guarded.locator('[data-testid="stAlertContentError"]', has_text="num_attention_heads")
    alert.first.wait_for()
    assert alert.first.locator("code", has_text=f"https://{EVIL}/x").count() == 1, alert.first.inner_text()
    assert_inert(guarded)
