"""No secret in any output: a known password is planted in every place preflight accepts a URL (the
history store's in preflight.toml, in $PREFLIGHT_HISTORY_URL and in `history --url`; Prometheus's in
preflight.toml and in --set; the Kubernetes API server's in a kubeconfig), well-formed and not, and
every file the commands write and everything they print is searched for it. The Prometheus is a
real one that requires basic authentication: the URL's credentials are sent as such, never taken
for part of a host name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
import warnings
from pathlib import Path

import pytest

from preflight.launch.ranks import free_port
from tests.conftest import run_preflight
from tests.integration.test_prometheus_alarms import stop

SECRET = "Pl4ntedS3cretXyz"
OUTPUTS = ("json", "md", "html", "junit", "prometheus")


def start_prometheus_with_basic_auth(home: Path) -> tuple[subprocess.Popen, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        hashed = crypt.crypt(SECRET, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
    home.mkdir()
    (home / "prometheus.yml").write_text(json.dumps({"global": {"scrape_interval": "5s"}}))
    (home / "web.yml").write_text(json.dumps({"basic_auth_users": {"alice": hashed}}))
    port = free_port()
    proc = subprocess.Popen(["prometheus", f"--config.file={home / 'prometheus.yml'}",
                             f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                             f"--web.config.file={home / 'web.yml'}"],
                            stdout=(home / "log").open("w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, (home / "log").read_text()[-2000:]
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2)
        except urllib.error.HTTPError as exc:
            if exc.code == 401:  # up, and asking for the password
                return proc, port
        except OSError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise AssertionError("prometheus did not start")


@pytest.fixture
def prometheus(tmp_path):
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus (Debian package prometheus) is not installed")
    proc, port = start_prometheus_with_basic_auth(tmp_path / "prom")
    try:
        yield port
    finally:
        stop(proc)


def leaks(root: Path, printed: list[str], planted: set[Path]) -> list[str]:
    found = [f"printed: {text[max(0, text.find(SECRET) - 80):text.find(SECRET) + 40]!r}"
             for text in printed if SECRET in text]
    for path in root.rglob("*"):
        if path.is_file() and path not in planted and "prom" not in path.relative_to(root).parts[:1]:
            if SECRET.encode() in path.read_bytes():
                found.append(str(path))
    return found


def test_a_planted_secret_appears_in_no_output(tmp_path, prometheus):
    closed = free_port()
    history = f"postgresql://preflight:{SECRET}@127.0.0.1:{closed}/history"
    prom = f"http://alice:{SECRET}@127.0.0.1:{prometheus}"
    config = tmp_path / "preflight.toml"
    config.write_text(f'[history]\nurl = "{history}"\n\n[checks."monitoring.alarms"]\nprometheus_url = "{prom}"\n')
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"https://kube:{SECRET}@127.0.0.1:{closed}"}}],
        "users": [{"name": "u", "user": {"token": SECRET}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    planted = {config, kubeconfig}
    printed: list[str] = []

    def preflight(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        done = run_preflight(*args, cwd=tmp_path, env={"KUBECONFIG": str(kubeconfig), **(env or {})}, timeout=180)
        printed.extend([done.stdout, done.stderr])
        assert "Traceback" not in done.stderr, done.stderr
        return done

    fmt = ",".join(OUTPUTS)
    first = preflight("run", "--config", str(config), "--checks", "monitoring.alarms", "--format", fmt,
                      "--out", "out1", "--textfile-dir", str(tmp_path))
    result = json.loads((tmp_path / "out1" / "results.json").read_text())
    [alarms] = [r for r in result["results"] if r["check_id"] == "monitoring.alarms"]
    # It got in (basic authentication): Prometheus answered, and a server without rules is a FAIL, not an ERROR.
    assert alarms["status"] == "FAIL", (alarms["summary"], first.stderr)
    assert "***" in result["judged_with"]["config_text"] and result["judged_with"].get("redacted")
    preflight("run", "--checks", "monitoring.alarms", "--set", f"monitoring.alarms.prometheus_url={prom}",
              "--format", fmt, "--out", "out2", env={"PREFLIGHT_HISTORY_URL": history})
    # URLs that do not parse: a port that is no number, an unclosed IPv6 bracket.
    broken = preflight("run", "--checks", "monitoring.alarms", "--set",
                       f"monitoring.alarms.prometheus_url=http://alice:{SECRET}@127.0.0.1:9x9/", "--format", fmt,
                       "--out", "out3", env={"PREFLIGHT_HISTORY_URL": f"postgresql://u:{SECRET}@db:5x32/h"})
    assert broken.returncode == 2 and "prometheus_url" in broken.stderr, broken.stderr  # exit 2 naming the key
    for url in (history, f"postgresql://u:{SECRET}@db:5x32/h", f"postgresql://u:{SECRET}@[::1/h"):
        listed = preflight("history", "list", "--url", url)
        assert listed.returncode == 2, listed.stdout + listed.stderr
        preflight("history", "list", env={"PREFLIGHT_HISTORY_URL": url})
    # A history URL without its scheme, userinfo with quotes, a hosts file's `user:password@host` line.
    for url in (f"preflight:{SECRET}@127.0.0.1:{closed}/history", f"://preflight:{SECRET}@127.0.0.1/history",
                f"postgresql://u:pa'\"{SECRET}@127.0.0.1:{closed}/h"):
        listed = preflight("history", "list", "--url", url)
        assert listed.returncode == 2, listed.stdout + listed.stderr
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"alice:{SECRET}@gpu01 slots=8\n")
    planted.add(hosts)
    assert preflight("run", "--nodes", str(hosts), "--out", "out6").returncode == 2
    # A Prometheus URL with a query string (a proxy's token) still reaches the API, with basic authentication.
    preflight("run", "--checks", "monitoring.alarms", "--set",
              f"monitoring.alarms.prometheus_url={prom}/?token={SECRET}&Session={SECRET}", "--format", fmt,
              "--out", "out7")
    [alarms] = json.loads((tmp_path / "out7" / "results.json").read_text())["results"]
    assert alarms["status"] == "FAIL", alarms["summary"]
    preflight("run", "--k8s", "--format", fmt, "--out", "out4")
    preflight("report", "out1/results.json", "--format", fmt, "--out", "out5")
    assert not leaks(tmp_path, printed, planted)
    assert os.path.exists(tmp_path / "preflight.prom")
