"""Render the HTML report in a real browser: run the plugin on models, then screenshot the page.

Runs ``pytest --dlbricks-html`` on the bundled ``sample_models/`` (or the folders given), checks that
the page is self-contained (no script, no stylesheet or font to fetch, no address to reach), and
opens it with headless Chromium (Debian package ``chromium``) with networking features off and a
fresh profile, saving a screenshot. A second screenshot shows the page with every per-model section
expanded. Look at the screenshots: that is the check.

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/html_report.py [--granularity G] [--validate] [--out DIR] [MODEL_DIR ...]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
#: What a self-contained page must not hold: scripts, fetched resources, any absolute address.
FORBIDDEN = re.compile(r"<script|<link|<iframe|<img|@import|url\(|https?://", re.IGNORECASE)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="Model folders. Default: sample_models/")
    parser.add_argument(
        "--granularity", metavar="G", type=int, default=2, help="Layers per brick. Default: %(default)r"
    )
    parser.add_argument(
        "--out", metavar="DIR", type=Path, default=Path("html-report"), help="Output folder. Default: %(default)s"
    )
    parser.add_argument(
        "--max-time", metavar="S", default="0.05", help="pytest-benchmark seconds per brick. Default: %(default)s"
    )
    parser.add_argument(
        "--validate", action="store_true", help="Also validate (--dlbricks-validate): the ratio chart. Default: off"
    )
    parser.add_argument("--width", type=int, default=1400, help="Browser window width. Default: %(default)r")
    parser.add_argument("--height", type=int, default=1800, help="Browser window height. Default: %(default)r")
    return parser.parse_args()


def run_plugin(models: list[Path], granularity: int, out: Path, max_time: str, validate: bool) -> Path:
    """pytest with dlbricks on ``models``, from the repository root (its setup.cfg sets the sample dims), with
    a store of its own in ``out`` so that bricks are timed and the peak measured."""
    html = out / "report.html"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--dlbricks-granularity={granularity}",
        f"--dlbricks-html={html}",
        f"--dlbricks-json={out / 'report.json'}",
        f"--benchmark-max-time={max_time}",
        f"--dlbricks-store={out / 'store'}",
        "--dlbricks-remeasure",
        *(["--dlbricks-validate"] if validate else []),
        *map(str, models),
    ]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    print(f"pytest: {time.perf_counter() - start:.1f} s, exit code {result.returncode}")
    if not html.is_file():
        sys.exit(f"no report written by {' '.join(command)}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return html


def check_self_contained(html: Path) -> None:
    text = html.read_text(encoding="utf-8")
    found = sorted({match.group(0) for match in FORBIDDEN.finditer(text)})
    if found:
        sys.exit(f"{html} is not self-contained: it holds {', '.join(found)}")
    print(f"{html}: {len(text) / 1024:.0f} KiB, self-contained (no script, link, image, import or address)")


def screenshot(browser: str, page: Path, png: Path, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory(prefix="dlbricks-chromium-") as profile:
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            f"--window-size={width},{height}",
            page.resolve().as_uri(),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0 or not png.is_file():
        sys.exit(f"{browser} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    print(f"screenshot: {png} ({png.stat().st_size / 1024:.0f} KiB)")


def main() -> None:
    args = parse_args()
    browser = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if browser is None:
        sys.exit("no Chromium found: install the Debian package chromium (apt-get install chromium)")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    html = run_plugin(args.models or [ROOT / "sample_models"], args.granularity, out, args.max_time, args.validate)
    check_self_contained(html)
    screenshot(browser, html, out / "report.png", args.width, args.height)
    expanded = out / "report-expanded.html"
    expanded.write_text(html.read_text(encoding="utf-8").replace("<details>", "<details open>"), encoding="utf-8")
    screenshot(browser, expanded, out / "report-expanded.png", args.width, args.height * 2)


if __name__ == "__main__":
    main()
