"""The fleet site as a person sees it: headless Chromium opens `preflight history site`'s index.html,
written from a history filled by `preflight history import` with a known image change (the all-reduce
7% slower after a driver and NCCL upgrade). The change is reported with its interval, the page writes
nothing to the console, and it fits a desktop and a phone screen (no sideways scrolling)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import run_preflight
from tests.integration.test_report_browser import CHROMIUM, chromium, console_messages
from tests.unit.history import fleet

pytestmark = pytest.mark.browser

NODES = fleet.node_names(4)
WIDTHS = {"desktop": 1280, "phone": 390}


@pytest.fixture(autouse=True)
def _needs_chromium() -> None:
    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (Debian/Ubuntu: apt-get install chromium)")


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory) -> Path:
    """An imported history of 8 runs before and 8 after an image change, and its site."""
    tmp = tmp_path_factory.mktemp("fleet-site")
    runs = tmp / "runs"
    for i in range(16):
        options = {"image": fleet.IMAGE_B, "busbw_factor": 0.93} if i >= 8 else {}
        report = fleet.fleet_report(NODES, fleet.START + timedelta(days=i), seed=i, **options)
        folder = runs / f"run-{i:02d}"
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(report))
    db = tmp / "history.sqlite"
    done = run_preflight("history", "import", str(runs), "--url", str(db), cwd=tmp)
    assert done.returncode == 0, done.stderr
    done = run_preflight("history", "site", "--out", str(tmp / "site"), "--url", str(db), cwd=tmp)
    assert done.returncode == 0, done.stderr
    return tmp / "site"


def _measured(page: Path, tmp_path: Path, width: int) -> tuple[str, list[str]]:
    """The page's DOM and console at `width`, from a copy that reports how wide its content is (a
    script the page itself would refuse: its policy allows none)."""
    probe = tmp_path / f"probe-{width}.html"
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    probe.write_text(text.replace("</body>", "<script>const root = document.documentElement;"
                                             "document.body.dataset.scrollWidth = root.scrollWidth;"
                                             "document.body.dataset.clientWidth = root.clientWidth;</script></body>"))
    done = chromium(tmp_path, "--dump-dom", f"--window-size={width},1000", probe.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, console_messages(done.stderr)


def test_the_image_change_is_reported_with_its_interval_and_no_console_error(site_dir, tmp_path):
    done = chromium(tmp_path, "--dump-dom", (site_dir / "index.html").as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert console_messages(done.stderr) == []
    dom = " ".join(done.stdout.split())
    assert "100% of the fleet is ready" in dom
    assert "driver 550.54.15 -&gt; 550.90.07, NCCL 2.20.5 -&gt; 2.21.5" in dom
    assert re.search(r"busbw at 1 GiB 7% lower \[\d+(\.\d)?%, \d+(\.\d)?%\], 8 runs before and 8 after", dom), dom[:3000]
    assert dom.count("<svg") >= 2  # the readiness trend and at least one key figure


@pytest.mark.parametrize("screen", sorted(WIDTHS))
def test_the_page_fits_the_screen_and_shows_its_readiness_banner(site_dir, tmp_path, screen):
    from PIL import Image

    width = WIDTHS[screen]
    dom, console = _measured(site_dir / "index.html", tmp_path, width)
    assert console == []
    scroll = int(re.search(r'data-scroll-width="(\d+)"', dom).group(1))
    # Headless Chromium draws no window narrower than its minimum (500 px): the phone's screen is that.
    window = int(re.search(r'data-client-width="(\d+)"', dom).group(1))
    assert window <= max(width, 500)
    assert scroll <= window, f"{screen}: content {scroll} px wide in a {window} px window"
    shot = tmp_path / f"{screen}.png"
    done = chromium(tmp_path, f"--screenshot={shot}", f"--window-size={width},1600",
                    (site_dir / "index.html").as_uri())
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]
    with Image.open(shot) as image:
        # The banner's colour for a fully ready fleet (GO green), in its padding above the first line.
        pixel = image.convert("RGB").getpixel((width // 2, 22))
    assert all(abs(a - b) <= 8 for a, b in zip(pixel, (0x1A, 0x7F, 0x37))), pixel
