"""Print deb822 `deb-src` stanzas for the `deb` entries of the given apt source files that serve a
release (its codename): what `apt-get source` needs, taken from the archive the machine already uses.

    python3 scripts/k8s/deb_src.py bookworm /etc/apt/sources.list /etc/apt/sources.list.d/*.sources

One-line entries (`deb [opts] URI SUITE COMPONENT...`) and deb822 stanzas are both read; an entry whose
suites do not include the codename itself (bookworm-updates, bookworm-security, another archive's
suites) is left out, and files that do not exist are ignored.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def one_line_entries(text: str, codename: str) -> list[dict[str, str]]:
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.match(r"^deb\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)\s+(?P<comps>.+)$", line)
        if not match or match["suite"] != codename:
            continue
        entry = {"URIs": match["uri"], "Suites": codename, "Components": match["comps"].strip()}
        signed = re.search(r"signed-by=(\S+)", match["opts"] or "")
        if signed:
            entry["Signed-By"] = signed.group(1)
        found.append(entry)
    return found


def deb822_entries(text: str, codename: str) -> list[dict[str, str]]:
    found = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and key:
                fields[key] += "\n" + line
                continue
            key, _, value = line.partition(":")
            key = key.strip()
            fields[key] = value.strip()
        if "deb" not in fields.get("Types", "").split() or codename not in fields.get("Suites", "").split():
            continue
        if fields.get("Enabled", "yes").lower() == "no":
            continue
        entry = {"URIs": fields["URIs"], "Suites": codename, "Components": fields.get("Components", "main")}
        if "Signed-By" in fields:
            entry["Signed-By"] = fields["Signed-By"]
        found.append(entry)
    return found


def main(argv: list[str]) -> int:
    codename, paths = argv[0], argv[1:]
    entries: list[dict[str, str]] = []
    for name in paths:
        path = Path(name)
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        entries += deb822_entries(text, codename) if path.suffix == ".sources" else one_line_entries(text, codename)
    seen = set()
    for entry in entries:
        key = (entry["URIs"], entry["Components"])
        if key in seen:
            continue
        seen.add(key)
        print("Types: deb-src")
        for field in ("URIs", "Suites", "Components", "Signed-By"):
            if field in entry:
                print(f"{field}: {entry[field]}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
