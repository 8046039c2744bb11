"""The management page in a real browser: Debian's chromium driven by Playwright.

One browser and the shared 3-node cluster for the whole module. The page is opened on c, the
node that gets cut off: a node cannot tell a peer that is cut off from one that is stopped,
but the node that paused knows it cannot see the others. Screenshots of each state go to the
test's tmp directory (docs/ui.png is one of them).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rabbitry.testing.cluster import Cluster
from tests.services import services_required

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
SHOTS = os.environ.get("RABBITRY_UI_SHOTS")  # a directory to keep the screenshots in


def _missing(what: str) -> None:
    message = f"{what} (apt-get install chromium; pip install playwright)"
    if services_required():
        pytest.fail(f"RABBITRY_REQUIRE_SERVICES=1: {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed")
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"{CHROMIUM} is not installed")
    with sync_playwright() as playwright:
        # --no-sandbox: the tests run as root in CI, where chromium's sandbox refuses to start
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def login_url(cluster: Cluster, node: str, ttl: float = 60.0) -> str:
    client = cluster.client(node)
    return client.url + client.request("POST", "/ui/token", {"ttl": ttl})["path"]


def shot(page: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(SHOTS) / path.name)


def row_state(page: Any, node: str) -> str | None:
    return page.get_attribute(f'#members tr[data-node="{node}"]', "data-state")


def test_login_see_the_cut_and_the_pause_then_the_heal(
    browser: Any, observed_cluster: Cluster, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    c = observed_cluster
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(login_url(c, "c"))
        assert page.url.endswith("/ui/"), "the login URL must redirect to a URL without the token"
        cookies = context.cookies()
        assert [(k["httpOnly"], k["sameSite"]) for k in cookies] == [(True, "Strict")]
        rows = page.locator("#members tbody tr")
        expect(rows).to_have_count(3)
        for name in c.nodes:
            expect(page.locator(f'#members tr[data-node="{name}"]')).to_have_attribute(
                "data-state", "running"
            )
        expect(page.locator("#partition-banner")).to_be_hidden()
        shot(page, tmp_path, "ui-formed")

        c.partition(["a", "b"], ["c"])
        try:
            # when c's status says paused, the page has 2 s to show it
            c.wait_for(lambda: c.status("c")["paused"], 20, "c paused")
            changed = time.monotonic()
            expect(page.locator("#partition-banner")).to_be_visible(timeout=2000)
            expect(page.locator('#members tr[data-node="c@127.0.0.1"]')).to_have_attribute(
                "data-state", "paused", timeout=max(1, 2000 - (time.monotonic() - changed) * 1000)
            )
            expect(page.locator("#paused-notice")).to_be_visible()
            banner = page.locator('#partition-rows tr[data-node="c@127.0.0.1"]')
            expect(banner).to_contain_text("a@127.0.0.1, b@127.0.0.1")
            for name in ("a@127.0.0.1", "b@127.0.0.1"):
                expect(page.locator(f'#members tr[data-node="{name}"]')).to_have_attribute(
                    "data-state", "down"
                )
            expect(page.locator("#timeline")).to_contain_text("paused")
            shot(page, tmp_path, "ui-partitioned")
        finally:
            c.heal()
        c.wait_for(lambda: not c.status("c")["paused"], 30, "c resumed")
        expect(page.locator("#partition-banner")).to_be_hidden(timeout=2000)
        for name in c.nodes:
            expect(page.locator(f'#members tr[data-node="{name}"]')).to_have_attribute(
                "data-state", "running", timeout=5000
            )
        shot(page, tmp_path, "ui-healed")
        assert errors == []
    finally:
        context.close()
        c.wait_until_formed(30)


def test_a_used_or_expired_login_link_is_refused(
    browser: Any, observed_cluster: Cluster, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    url = login_url(observed_cluster, "a")
    first = browser.new_context()
    try:
        first.new_page().goto(url)
    finally:
        first.close()
    second = browser.new_context()
    try:
        page = second.new_page()
        response = page.goto(url)
        assert response is not None and response.status == 401
        expect(page.locator("h1")).to_have_text("This login link is not valid")
        shot(page, tmp_path, "ui-used-link")
        expired = login_url(observed_cluster, "a", ttl=0.2)
        time.sleep(0.4)  # the link's lifetime is the point of the test
        response = page.goto(expired)
        assert response is not None and response.status == 401
        assert second.cookies() == []
        response = page.goto(expired.split("/ui/")[0] + "/ui/")
        assert response is not None and response.status == 401
        expect(page.locator("h1")).to_have_text("Not logged in")
    finally:
        second.close()


def test_an_ephemeral_member_is_shown_and_counted(
    browser: Any, observed_cluster: Cluster, tmp_path: Path
) -> None:
    """Last in this package: the ephemeral member stays attached until the session ends."""
    from playwright.sync_api import expect

    from tests.rabbitry.observe.conftest import metrics_address
    from tests.rabbitry.observe.test_metrics_node import samples, scrape

    c = observed_cluster
    (name,) = c.add_ephemeral(1)
    c.wait_for(lambda: name in c.status("a").get("ephemeral", []), 20, f"a to see {name}")

    def ephemeral_count() -> float:
        family = scrape(metrics_address(c, "a"))[0]["rabbitry_cluster_members"]
        return samples(family)[(("role", "ephemeral"),)]

    c.wait_for(lambda: ephemeral_count() == 1.0, 10, "the ephemeral member counted")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.goto(login_url(c, "a"))
        row = page.locator(f'#members tr[data-node="{name}"]')
        expect(row).to_have_attribute("data-state", "running")
        expect(row.locator("td").nth(1)).to_have_text("ephemeral")
        expect(page.locator("#members tbody tr")).to_have_count(4)
        shot(page, tmp_path, "ui-ephemeral")
    finally:
        context.close()
