"""Remake ``docs/img/report.png``: the report of a committed golden run, in headless Chromium.

The run folder ``tests/fixtures/runs/scenario-ram`` is copied to a temporary folder (the fixture is never written
to), its report rendered there by ``pipeprof report``, opened in Debian's chromium (``make browser``; or
``PIPEPROF_CHROMIUM``) through Playwright with no network, and the top of the page (verdict, recommendations,
headline numbers) saved, cropped to the page's column. ``python docs/screenshot.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "fixtures" / "runs" / "scenario-ram"
OUT = ROOT / "docs" / "img" / "report.png"
VIEWPORT = {"width": 1600, "height": 1400}
CROP = (250, 0, 1350, 1760)  # the page's column, down to the headline numbers (pixels of VIEWPORT's width)


def main() -> int:
    from PIL import Image
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("PIPEPROF_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("docs/screenshot.py: no chromium (make browser, or set PIPEPROF_CHROMIUM)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / RUN.name
        shutil.copytree(RUN, run)
        subprocess.run([sys.executable, "-m", "pipeprof", "report", "--quiet", str(run)], check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        shot = Path(tmp) / "full.png"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport=VIEWPORT)
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
            page.goto((run / "report.html").as_uri())
            page.wait_for_timeout(1000)
            page.screenshot(path=str(shot), full_page=True)
            browser.close()
        Image.open(shot).crop(CROP).convert("RGB").quantize(colors=128).save(OUT, optimize=True)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
