"""Full-page PNG of a rendered report page, in Debian's headless Chromium.

python3 scripts/screenshot.py reports/index.html docs/hopper-matrix.png
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

ARGS = [
    "--no-sandbox",
    "--headless=new",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def main(page_path: str, png_path: str, width: int = 1280) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        context = browser.new_context(java_script_enabled=False, viewport={"width": width, "height": 300})
        page = context.new_page()
        page.goto(Path(page_path).resolve().as_uri())
        page.screenshot(path=png_path, full_page=True)
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
