"""Headless Chromium for the browser tests (Debian's chromium; .ci/run installs it and sets
BENCH_REQUIRE_BROWSER so these tests run there, never skip)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")

needs_browser = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("BENCH_REQUIRE_BROWSER"),
    reason="Debian's chromium is not installed (.ci/run installs it and sets BENCH_REQUIRE_BROWSER)",
)


def chromium(*args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium with the flags a closed network needs and a fresh profile."""
    assert CHROMIUM, "BENCH_REQUIRE_BROWSER is set but chromium is not installed"
    profile = tempfile.mkdtemp()
    try:
        return subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)


# the page measures itself: how wide the document is, and how far the chosen tables reach beyond the
# page's body or their own box (0: they fit whole)
WIDTH_PROBE = """<script>
const body = document.body.getBoundingClientRect().right;
const tables = [...document.querySelectorAll(%r)];
document.body.dataset.scrollWidth = document.documentElement.scrollWidth;
document.body.dataset.over = Math.max(0, ...tables.map(
  (t) => Math.max(t.getBoundingClientRect().right - body, t.scrollWidth - t.clientWidth)));
document.body.dataset.tables = tables.length;
</script>"""


def measured_page(html: str, folder: Path, window: int, selectors: tuple[str, ...]) -> dict:
    """Lay ``html`` out in Chromium at ``window`` px: the page's scroll width, how far the tables
    ``selectors`` pick overflow (``over``, px) and how many there are, and the DOM (``dom``)."""
    page = folder / f"measured-{window}.html"
    page.write_text(html.replace("</body>", WIDTH_PROBE % ", ".join(selectors) + "</body>"))
    dom = chromium(f"--window-size={window},900", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    head = dom.stdout.split("<body", 1)[1].split(">", 1)[0]
    found = {k: round(float(v)) for k, v in re.findall(r'data-([a-z-]+)="([0-9.]+)"', head)}
    return {"dom": dom.stdout, **found}
