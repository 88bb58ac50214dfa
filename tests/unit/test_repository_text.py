"""The repository names no package registry's host: apt sources come from the machine's own sources
list (scripts/k8s/deb_src.py), real lock files kept as test data name their index as
https://index.example/..., and the docs point at projects' own sites, not at their package indexes."""

from __future__ import annotations

import subprocess

from tests.conftest import ROOT

# Written in pieces, so that this file does not name them either.
HOSTS = ["pypi" + ".org", "files.python" + "hosted.org", "download.py" + "torch.org", "pypi.nvi" + "dia.com",
         "developer.download.nvi" + "dia.com", "deb.deb" + "ian.org", "security.deb" + "ian.org",
         "registry.npm" + "js.org", "conda.ana" + "conda.org", "repo.ana" + "conda.com"]


def _tracked_files():
    proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                          capture_output=True, check=False)
    if proc.returncode != 0:  # not a git checkout (an unpacked source tree): every file
        return [p for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts and ".git" not in p.parts]
    return [ROOT / name for name in proc.stdout.decode().split("\0") if name]


def test_no_file_names_a_package_registry_host():
    named = []
    for path in _tracked_files():
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace").lower()
        named += [f"{path.relative_to(ROOT)}: {host}" for host in HOSTS if host in text]
    assert named == []


def test_deb_src_entries_come_from_the_machines_own_sources(tmp_path):
    import sys

    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://mirror.example/debian\nSuites: trixie trixie-updates\n"
                      "Components: main contrib\nSigned-By: /usr/share/keyrings/k.gpg\n\n"
                      "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: trixie-security\n"
                      "Components: main\n")
    one_line = tmp_path / "sources.list"
    one_line.write_text("# comment\ndeb [arch=amd64 signed-by=/k2.gpg] http://other.example/debian trixie main\n"
                        "deb-src http://other.example/debian trixie main\n")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/k8s/deb_src.py"), "trixie", str(one_line), str(deb822),
                           str(tmp_path / "missing.list")], capture_output=True, text=True, check=True)
    stanzas = [s for s in proc.stdout.split("\n\n") if s.strip()]
    assert stanzas == [
        "Types: deb-src\nURIs: http://other.example/debian\nSuites: trixie\nComponents: main\nSigned-By: /k2.gpg",
        "Types: deb-src\nURIs: http://mirror.example/debian\nSuites: trixie\nComponents: main contrib\n"
        "Signed-By: /usr/share/keyrings/k.gpg",
    ]
