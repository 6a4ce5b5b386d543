"""Browser fixtures: a headless Chromium page (Playwright), its screenshot on failure."""

from __future__ import annotations

import os
import shutil

import pytest

from backfill_assets.settings import PROJECT_ROOT

ARTIFACTS = PROJECT_ROOT / "var" / "test-artifacts" / "ui"


def chromium() -> str:
    """The system's Chromium (Playwright's own download needs the internet)."""
    found = (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if not found:
        pytest.fail("no Chromium: run `make browser-deps` (deploy/browser-deps.sh)")
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        item.failed_call = True
    return report


@pytest.fixture
def page(request):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(60_000)
            # the first-visit newsletter dialog, whenever it shows (late on a busy machine):
            # dismissed before any action it would cover
            page.add_locator_handler(
                page.get_by_text("Join the Dagster community"),
                lambda: page.get_by_role("button", name="Skip").click(),
            )
            yield page
            if getattr(request.node, "failed_call", False):
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=ARTIFACTS / f"{request.node.name}.png")
        finally:
            browser.close()
