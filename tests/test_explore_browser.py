"""The explorer in a real browser: headless Chromium driven by its chromedriver through selenium.
From the model to "Key content up-projection" by clicking through the tree, the figures on the page,
the search box, a deep link, no console errors, and a screenshot at 1280 × 800 for people to look at
(under tmp, and in KIMICOUNT_SCREENSHOT_DIR when set). Where no browser is installed (a user's
machine) the test skips and says why; .ci/run installs Chromium and its driver."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .helpers import invoke

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser() -> tuple[str, str] | None:
    driver = shutil.which("chromedriver")
    binary = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    return (binary, driver) if binary and driver else None


def _session(width: int, height: int, mobile: bool):
    found = _browser()
    if found is None:
        pytest.skip("no Chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra)")
    from selenium.webdriver.chrome.service import Service

    binary, driver = found
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={width},{height}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # the driver named explicitly: Selenium Manager never looks for (or downloads) one
    session = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    session.set_window_size(width, height)
    # the page itself width × height (the window's frame would take some of it)
    session.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )
    return session


@pytest.fixture
def browser():
    session = _session(1280, 800, mobile=False)
    try:
        yield session
    finally:
        session.quit()


@pytest.fixture
def phone():
    session = _session(390, 844, mobile=True)  # an iPhone 12–15's viewport in CSS pixels
    try:
        yield session
    finally:
        session.quit()


def _screenshot(session, path: Path, size: tuple[int, int]) -> None:
    """A screenshot of the page at `size`, checked to be one, kept under tmp and, when
    KIMICOUNT_SCREENSHOT_DIR is set, there too, for people to look at."""
    session.save_screenshot(str(path))
    header = path.read_bytes()[:24]  # PNG: signature, IHDR length and type, width, height
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")) == size
    if os.environ.get("KIMICOUNT_SCREENSHOT_DIR"):
        folder = Path(os.environ["KIMICOUNT_SCREENSHOT_DIR"])
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / path.name)


def _visible_section(session):
    from selenium.webdriver.common.by import By

    shown = [s for s in session.find_elements(By.CSS_SELECTOR, "section.page") if s.is_displayed()]
    assert len(shown) == 1, [s.get_attribute("id") for s in shown]
    return shown[0]


def test_explorer_in_a_real_browser(browser, tmp_path):
    from selenium.webdriver.common.by import By

    out = tmp_path / "kimi-k2.html"
    result = invoke("explore", "-o", str(out))
    assert result.exit_code == 0, result.output
    browser.get(out.as_uri())

    # without a fragment the model's page shows
    assert _visible_section(browser).get_attribute("id") == "model"

    # from the model to the key content up-projection by clicking through the tree: fold the
    # 60 MoE blocks open if needed, then click each name on the way
    nav = browser.find_element(By.TAG_NAME, "nav")
    for step in ("61 transformer blocks", "60 MoE blocks (layers 1–60)", "Latent attention", "Key heads"):
        link = next(
            a for a in nav.find_elements(By.CSS_SELECTOR, "a[data-id]") if a.text == step and a.is_displayed()
        )
        link.click()
        details = link.find_element(By.XPATH, "./ancestor::details[1]")
        if details.get_attribute("open") is None:
            details.find_element(By.TAG_NAME, "summary").click()
    targets = [a for a in nav.find_elements(By.LINK_TEXT, "Key content up-projection") if a.is_displayed()]
    targets[-1].click()  # the last: the one under the MoE blocks
    page = _visible_section(browser)
    assert page.get_attribute("id") == "key-content-up-projection"
    text = page.text
    for needle in (
        "4,194,304",
        "251,658,240",
        "255,852,544",
        "c_KV [B batch, T positions, 512 key–value latent]",
        "k_C [B batch, T positions, 8,192 = 64 heads × 128]",
        "61 transformer blocks › 60 MoE blocks › Latent attention › Key heads › Key content up-projection",
    ):
        assert needle in text
    assert page.find_element(By.TAG_NAME, "math").is_displayed()

    _screenshot(browser, tmp_path / "explorer.png", (1280, 800))

    # the search box: type an attribute, follow the first result
    search = browser.find_element(By.ID, "search")
    assert search.is_displayed()
    search.send_keys("kv_b_pr")
    results = browser.find_elements(By.CSS_SELECTOR, "#results a")
    assert results and "kv_b_proj" in results[0].text
    results[0].click()
    assert browser.current_url.endswith("#kv_b_proj")
    page = _visible_section(browser)
    assert page.get_attribute("id") == "kv_b_proj"
    assert "features 128–255 of each head's 256" in page.text

    # a concrete tensor name finds its tensor's page
    search.clear()
    search.send_keys("model.layers.5.mlp.experts.17.down_proj.weight_scale_inv")
    results = browser.find_elements(By.CSS_SELECTOR, "#results a")
    assert [a.get_attribute("href").rsplit("#", 1)[-1] for a in results] == ["experts.down_proj"]
    search.clear()

    # a deep link opens its page directly
    browser.get(out.as_uri() + "#compressed_kv")
    page = _visible_section(browser)
    assert "Key–value latent" in page.text and "512 key–value latent" in page.text
    browser.get(out.as_uri() + "#latent-attention")
    page = _visible_section(browser)
    for figure in ("101,124,096", "2,498,560 B", "2,998,272 B", "70,272 B"):
        assert figure in page.text

    # light and dark by the system's setting; printed, the page without the tree
    def background() -> str:
        return browser.execute_script("return getComputedStyle(document.body).backgroundColor")

    def emulate(**media) -> None:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", media)

    emulate(features=[{"name": "prefers-color-scheme", "value": "dark"}])
    dark = background()
    emulate(features=[{"name": "prefers-color-scheme", "value": "light"}])
    assert background() == "rgb(255, 255, 255)" and dark != background()
    emulate(media="print")
    assert not browser.find_element(By.TAG_NAME, "nav").is_displayed()
    assert _visible_section(browser).get_attribute("id") == "latent-attention"
    emulate(media="")

    errors = [entry for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
    assert errors == []


def test_a_model_named_like_html_runs_no_script_in_the_browser(browser, tmp_path):
    from selenium.webdriver.common.by import By

    from .helpers import FIXTURES

    folder = tmp_path / "<img src=x onerror=alert(1)>"
    folder.mkdir()
    shutil.copy(FIXTURES / "kimi-k2-instruct" / "config.json", folder / "config.json")
    out = tmp_path / "hostile.html"
    assert invoke("explore", "--config", str(folder), "-o", str(out)).exit_code == 0
    browser.get(out.as_uri())
    assert browser.find_elements(By.TAG_NAME, "img") == []
    assert "<img src=x onerror=alert(1)>" in browser.find_element(By.TAG_NAME, "h1").text
    browser.find_element(By.ID, "search").send_keys("<img")
    assert browser.find_elements(By.TAG_NAME, "img") == []


def _rect(session, selector: str) -> dict:
    return session.execute_script(
        "var r = document.querySelector(arguments[0]).getBoundingClientRect();"
        "return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width};",
        selector,
    )


def _settle(session) -> None:
    """Wait for the drawer's slide (0.15 s) to end."""
    session.execute_async_script("var done = arguments[arguments.length - 1]; setTimeout(done, 400);")


def test_explorer_on_a_phone(phone, tmp_path):
    # issue 27: at 390 × 844 the tree kept ~340 px, the page ~45 px and the search box was off screen
    from selenium.webdriver.common.by import By

    out = tmp_path / "kimi-k2.html"
    assert invoke("explore", "-o", str(out)).exit_code == 0
    phone.get(out.as_uri())
    assert _visible_section(phone).get_attribute("id") == "model"
    # the page has the whole width; the tree is a drawer, closed; nothing scrolls sideways
    assert _rect(phone, "main")["width"] >= 370
    assert _rect(phone, "nav")["right"] <= 0
    assert phone.execute_script("return document.documentElement.scrollWidth") <= 390
    # the search box is on screen
    search = _rect(phone, "#search")
    assert search["left"] >= 0 and search["right"] <= 390 and 0 <= search["top"] and search["bottom"] <= 844
    _screenshot(phone, tmp_path / "explorer-phone.png", (390, 844))

    # the drawer opens from the header, and a part chosen in it closes it and shows its page
    phone.find_element(By.CSS_SELECTOR, 'label[for="drawer"]').click()
    _settle(phone)
    drawer = _rect(phone, "nav")
    assert drawer["left"] == 0 and drawer["width"] > 300
    _screenshot(phone, tmp_path / "explorer-phone-tree.png", (390, 844))
    # a tap beside it closes it; then open again
    phone.execute_script("document.querySelector('main').click()")
    _settle(phone)
    assert _rect(phone, "nav")["right"] <= 0
    phone.find_element(By.CSS_SELECTOR, 'label[for="drawer"]').click()
    _settle(phone)
    nav = phone.find_element(By.TAG_NAME, "nav")
    next(a for a in nav.find_elements(By.CSS_SELECTOR, "a[data-id]") if a.text == "Latent attention").click()
    assert _visible_section(phone).get_attribute("id") == "latent-attention"
    _settle(phone)
    assert _rect(phone, "nav")["right"] <= 0

    # the search: type, follow the first result
    box = phone.find_element(By.ID, "search")
    box.send_keys("kv_b_pr")
    results = phone.find_elements(By.CSS_SELECTOR, "#results a")
    assert results and results[0].is_displayed()
    assert _rect(phone, "#results")["right"] <= 390
    results[0].click()
    page = _visible_section(phone)
    assert page.get_attribute("id") == "kv_b_proj"
    # the owners by name, not by id (issue 27: "Owner routed-experts")
    assert "Key content up-projection" in page.text and "key-content-up-projection" not in page.text
    errors = [entry for entry in phone.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
    assert errors == []


def test_an_unknown_anchor_says_so_and_code_has_line_numbers(browser, tmp_path):
    from selenium.webdriver.common.by import By

    from .helpers import ROOT

    out = tmp_path / "kimi-k2.html"
    modeling = ROOT / "tests" / "data" / "modeling_deepseek.py.txt"
    assert invoke("explore", "--modeling", str(modeling), "-o", str(out)).exit_code == 0
    # issue 27: an unknown #anchor silently showed the model's page
    browser.get(out.as_uri() + "#no-such-part")
    notice = browser.find_element(By.ID, "no-page")
    assert notice.is_displayed() and "“no-such-part”" in notice.text
    assert _visible_section(browser).get_attribute("id") == "model"
    browser.get(out.as_uri() + "#key-content-up-projection")
    assert not browser.find_element(By.ID, "no-page").is_displayed()
    # code with its line numbers: kv_b_proj's definition, lines 676–681
    numbers = [n.text for n in _visible_section(browser).find_elements(By.CSS_SELECTOR, "pre .ln")]
    assert [str(n) for n in range(676, 682)] == numbers[: 682 - 676]
