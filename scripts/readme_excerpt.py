"""Put the beginning of a real run's report.md into README.md ("What a report looks like").

    python scripts/readme_excerpt.py            # a standard run of the built-in checks on this machine
    python scripts/readme_excerpt.py --level quick

It runs `preflight run` in an empty temporary directory (no pins there, as in a fresh directory)
with the checks this tree registers in pyproject.toml (plugins installed beside it are skipped),
(shown as ~/training-repo), then replaces what stands between the README's `<!-- excerpt: scripts/readme_excerpt.py -->` and
`<!-- /excerpt -->` with the report's verdict, findings and key figures, lines wrapped. Nothing in
the excerpt is edited by hand.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
START = "<!-- excerpt: scripts/readme_excerpt.py -->"
END = "<!-- /excerpt -->"
WIDTH = 104


def built_in() -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return sorted(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["preflight.checks"])


def installed() -> list[str]:
    sys.path.insert(0, str(ROOT))
    from preflight.core.registry import discover

    return sorted(discover().checks)


def run(level: str) -> tuple[str, int]:
    """report.md of a run of the built-in checks, and its exit code."""
    others = [cid for cid in installed() if cid not in built_in()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "CI": "1"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    with tempfile.TemporaryDirectory(prefix="preflight-excerpt-") as scratch:
        # A directory of its own, shown as ~/training-repo: the random temporary prefix says nothing.
        work = Path(scratch) / "training-repo"
        work.mkdir()
        env["XDG_DATA_HOME"] = str(Path(scratch) / "data")  # a fleet history of its own, empty, as on a fresh machine
        argv = [sys.executable, "-m", "preflight", "run", "--out", "out", "--level", level, "--format", "md"]
        if others:
            argv += ["--skip", ",".join(others)]
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=3600)
        report = work / "out" / "report.md"
        if not report.exists():
            sys.exit(f"preflight run wrote no report (exit {done.returncode}):\n{done.stderr[-3000:]}")
        return report.read_text().replace(str(Path(scratch).resolve()), "~").replace(scratch, "~"), done.returncode


def excerpt(report: str) -> str:
    """The report down to (not including) the cluster at a glance, each line wrapped."""
    head = report.split("### Cluster at a glance")[0].rstrip()
    lines = []
    for line in head.splitlines():
        if len(line) <= WIDTH or line.startswith("|"):
            lines.append(line)
            continue
        indent = len(line) - len(line.lstrip(" "))
        follow = " " * (indent + (2 if line.lstrip().startswith("- ") else 0))
        lines += textwrap.wrap(line, WIDTH, subsequent_indent=follow, break_long_words=False,
                               break_on_hyphens=False)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", default="standard", choices=["quick", "standard", "thorough"])
    args = parser.parse_args()
    report, code = run(args.level)
    cpus = os.cpu_count()
    where = f"{cpus}-core {platform.machine()} machine, Python {platform.python_version()}, exit code {code}"
    block = (f"{START}\n<!-- from `preflight run --level {args.level}` on a {where} -->\n\n"
             f"```markdown\n{excerpt(report)}\n```\n{END}")
    text = README.read_text()
    if START not in text or END not in text:
        sys.exit(f"README.md has no {START} ... {END} markers")
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    README.write_text(before + block + after)
    print(f"README.md: excerpt of a {args.level} run ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
