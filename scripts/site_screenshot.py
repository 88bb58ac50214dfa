"""Write docs/fleet-site.png, the README's picture of `preflight history site`.

    python scripts/site_screenshot.py

It fills a history store in a temporary directory with 24 runs of 6 nodes (tests/unit/history/fleet.py:
results judged by the real checks; figures synthesised, the second half on a newer driver and NCCL
with a 7% slower all-reduce, one node failing its last run), imports them with `preflight history
import`, writes the site with `preflight history site`, and has headless Chromium (Debian's
`chromium`) take a screenshot of its first screen. Nothing in the picture is drawn by hand.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "fleet-site.png"
SIZE = (1280, 1500)


def main() -> None:
    from tests.unit.history import fleet

    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        sys.exit("scripts/site_screenshot.py: needs headless Chromium (Debian/Ubuntu: apt-get install chromium)")
    nodes = fleet.node_names(6)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for i in range(24):
            options = {"image": fleet.IMAGE_B, "busbw_factor": 0.93} if i >= 12 else {}
            if i == 23:
                options["slow"] = {"gpu03": 0.5}
            folder = work / "runs" / f"run-{i:02d}"
            folder.mkdir(parents=True)
            report = fleet.fleet_report(nodes, fleet.START + timedelta(days=i), seed=i, **options)
            (folder / "results.json").write_text(json.dumps(report))
        preflight = [sys.executable, "-m", "preflight"]
        db = str(work / "history.sqlite")
        subprocess.run([*preflight, "history", "import", str(work / "runs"), "--url", db], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([*preflight, "history", "site", "--out", str(work / "site"), "--url", db], check=True)
        OUT.parent.mkdir(exist_ok=True)
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                        f"--user-data-dir={work / 'profile'}", f"--window-size={SIZE[0]},{SIZE[1]}",
                        f"--screenshot={OUT}", (work / "site" / "index.html").as_uri()],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
