#!/usr/bin/env python3
"""Render a fusion-dd HTML report in headless Chromium and save a PNG screenshot.

    python scripts/screenshot_report.py REPORT_HTML OUT_PNG [--width 1200] [--height 3400]
    python scripts/screenshot_report.py --demo docs/report.png   # run the demo first, then shoot it

The README's screenshot (docs/report.png) is made with ``--demo``. Exit code 0 with
the PNG written; 77 (the "skipped" code of automake and CI harnesses) when no
Chromium or Chrome is installed, so that CI can skip instead of failing; 1 when
the browser ran but wrote no image.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SKIPPED = 77
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_browser() -> str | None:
    """The first headless-capable Chromium on PATH (or named by $CHROMIUM)."""
    named = os.environ.get("CHROMIUM")
    if named:
        return shutil.which(named) or (named if Path(named).exists() else None)
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot(browser: str, page: Path, out: Path, width: int, height: int) -> bool:
    """One headless render of ``page`` into ``out``; True when a PNG was written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    with tempfile.TemporaryDirectory(prefix="fusion-dd-chromium-") as profile:
        argv = [
            browser,
            "--headless",
            "--no-sandbox",  # containers and CI run as root, where the sandbox refuses to start
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={out.resolve()}",
            page.resolve().as_uri(),
        ]
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=180, check=False)
    return out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def demo_report(folder: Path) -> Path:
    """Run ``fusion-dd demo`` in ``folder`` and return its report.html."""
    state = folder / "demo"
    subprocess.run(
        [sys.executable, "-m", "fusion_dd.cli", "demo", "--state-dir", str(state)],
        cwd=folder, check=True, stdout=subprocess.DEVNULL,
    )
    return state / "report.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", nargs="?", type=Path, help="report.html to render")
    parser.add_argument("out", type=Path, help="PNG to write")
    parser.add_argument("--demo", action="store_true", help="run fusion-dd demo and render its report")
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=3400)
    args = parser.parse_args(argv)
    browser = find_browser()
    if browser is None:
        print("screenshot_report: no Chromium/Chrome found (set $CHROMIUM); skipped", file=sys.stderr)
        return SKIPPED
    with tempfile.TemporaryDirectory(prefix="fusion-dd-shot-") as scratch:
        page = demo_report(Path(scratch)) if args.demo else args.page
        if page is None or not page.exists():
            parser.error("give a report.html, or --demo")
        if not screenshot(browser, page, args.out, args.width, args.height):
            print(f"screenshot_report: {browser} wrote no PNG", file=sys.stderr)
            return 1
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
