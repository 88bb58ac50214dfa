"""report.html in a real browser: headless Chromium (Debian's `chromium` package) opens the file,
and the tests assert on the page it rendered (verdict, findings, charts), on its console (no
errors), on pixels of its screenshot (the verdict banner is visible in the verdict's colour), and
that it prints to PDF. Screenshots and PDFs stay in each test's temporary directory.

Chromium runs in its own session, so every process it starts is killed on the way out, by that
session's process group.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from preflight.core.model import Finding, NodeInfo, RunReport, Status
from preflight.reporters import figures, html
from tests.conftest import DATA, make_report, make_result, run_preflight

pytestmark = pytest.mark.browser

# Debian's `chromium`; elsewhere the same browser under another name, or the one PREFLIGHT_CHROMIUM names.
CHROMIUM = next((found for found in (os.environ.get("PREFLIGHT_CHROMIUM"), shutil.which("chromium"),
                                     shutil.which("chromium-browser"), shutil.which("google-chrome")) if found), None)
BANNER_COLOURS = {"GO": (0x1A, 0x7F, 0x37), "NO-GO": (0xCF, 0x22, 0x2E), "INCOMPLETE": (0x9A, 0x67, 0x00)}
WINDOW = (1280, 2000)


@pytest.fixture(autouse=True)
def _needs_chromium() -> None:
    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (Debian/Ubuntu: apt-get install chromium)")


def chromium(tmp_path: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", "--hide-scrollbars", f"--user-data-dir={profile}",
            "--enable-logging=stderr", "--v=0", *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        # The browser's helpers (zygote, renderer, GPU process) share its process group.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def console_messages(stderr: str) -> list[str]:
    """What the page wrote to its console (errors, uncaught exceptions, failed loads)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


class Page(HTMLParser):
    """The rendered DOM, reduced to what the tests look at."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.ids: list[str] = []
        self.text_by_id: dict[str, str] = {}
        self._open: list[tuple[str, str | None]] = []
        self.feed(dom)

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def _element(self, tag: str, attrs: list[tuple[str, str | None]]) -> str | None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        element_id = dict(attrs).get("id")
        if element_id:
            self.ids.append(element_id)
            self.text_by_id.setdefault(element_id, "")
        return element_id

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element_id = self._element(tag, attrs)
        if tag not in self.VOID:
            self._open.append((tag, element_id))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._element(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if any(open_tag == tag for open_tag, _ in self._open):
            while self._open.pop()[0] != tag:
                pass

    def handle_data(self, data: str) -> None:
        if any(tag in ("style", "script") for tag, _ in self._open):
            return
        for _, element_id in self._open:
            if element_id in ("verdict", "findings", "blocking", "charts", "glance"):
                self.text_by_id[element_id] += " " + data

    def text(self, element_id: str) -> str:
        return " ".join(self.text_by_id.get(element_id, "").split())


def open_report(path: Path, tmp_path: Path) -> tuple[Page, list[str]]:
    done = chromium(tmp_path, "--dump-dom", path.resolve().as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return Page(done.stdout), console_messages(done.stderr)


def screenshot(path: Path, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    done = chromium(tmp_path, f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                    path.resolve().as_uri())
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]
    return shot


def banner_colour(shot: Path) -> tuple[int, int, int]:
    from PIL import Image

    with Image.open(shot) as image:
        # The middle of the banner's first line: right of the verdict, where no text is.
        return image.convert("RGB").getpixel((WINDOW[0] // 2, 40))


def assert_banner(shot: Path, verdict: str) -> None:
    pytest.importorskip("PIL")
    assert all(abs(a - b) <= 8 for a, b in zip(banner_colour(shot), BANNER_COLOURS[verdict])), banner_colour(shot)


def print_to_pdf(path: Path, tmp_path: Path) -> Path:
    pdf = tmp_path / "report.pdf"
    done = chromium(tmp_path, f"--print-to-pdf={pdf}", "--no-pdf-header-footer", path.resolve().as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return pdf


# ---------------------------------------------------------------------------------------------------

def test_the_console_check_catches_a_page_error(tmp_path):
    # The check on the real reports is only worth something if it sees errors where there are some.
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><p>x</p><script>console.error("boom"); throw new Error("kaput")</script>')
    _, console = open_report(page, tmp_path)
    assert any("Uncaught Error: kaput" in line for line in console)
    assert any('"boom"' in line for line in console)


def test_a_synthesised_cluster_report_with_every_chart(tmp_path):
    pytest.importorskip("matplotlib")
    data = json.loads((DATA / "reports" / "cluster_run.json").read_text())
    data.pop("_source")
    path = tmp_path / "report.html"
    path.write_text(html.render(RunReport.from_dict(data)))

    page, console = open_report(path, tmp_path)
    assert console == []
    verdict = page.text("verdict")  # one plain sentence of what is wrong and what to do, the reasoning below
    assert verdict.startswith("NO-GO Not ready to train: ") and "2 blocking findings: " in verdict
    findings = page.text("findings")
    assert "BLOCKS The slowest link, gpu02 -> gpu03, carries 4.2 Gbit/s, below the 10 Gbit/s the cluster needs." \
        in findings
    assert "torch DataLoader supply is 14,336 samples/s" in findings
    assert "8 devices deliver the throughput of 6.9 (86% efficiency)" in findings
    assert "-&gt;" not in findings and "(spread 36% over 3 runs)" in findings
    assert "24 x NVIDIA H100 80GB HBM3 (8 per node)" in page.text("glance")
    assert "net.bandwidth across the cluster" in page.text("blocking")
    assert "pip install" not in page.text("charts")
    assert page.tags.get("svg") == 5 and page.tags.get("figure") == 5
    for title in ("Data-parallel scaling across the node's devices", "TCP bandwidth between nodes (iperf3)",
                  "Data loading: can storage and the input pipeline feed the GPUs",
                  "Checkpoints: exact round trip, write/read speed, resume after a kill",
                  "All-reduce among the node's devices (NCCL, gloo)"):
        assert title in page.text("charts")
    assert page.ids.index("verdict") < page.ids.index("blocking") < page.ids.index("findings") \
        < page.ids.index("charts") < page.ids.index("matrix") < page.ids.index("checks")

    assert_banner(screenshot(path, tmp_path, "cluster-report.png"), "NO-GO")
    pdf = print_to_pdf(path, tmp_path)
    content = pdf.read_bytes()
    assert content.startswith(b"%PDF") and len(re.findall(rb"/Type\s*/Page\b", content)) >= 3


def test_the_report_of_a_real_run_on_this_machine(tmp_path):
    checks = ["node.environment", "versions.pinned"]
    try:
        import torch  # noqa: F401
        checks.append("collectives.local")  # all-reduce among CPU processes: a chart from real figures
    except ImportError:
        pass
    proc = run_preflight("run", "--checks", ",".join(checks), "--out", "out", cwd=tmp_path, timeout=240)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    verdict = results["verdict"]["verdict"]
    assert proc.returncode == results["verdict"]["exit_code"], proc.stdout + proc.stderr

    path = tmp_path / "out" / "report.html"
    page, console = open_report(path, tmp_path)
    assert console == []
    assert page.text("verdict").startswith(verdict)
    assert "Nodes 1:" in page.text("glance") and "Frameworks" in page.text("glance")
    # Every group of figures the checks declared, and only those, is drawn (a default install has matplotlib).
    drawable = [g for g in figures.figure_groups(RunReport.from_dict(results)) if figures.drawable(g)]
    assert page.tags.get("svg", 0) == len(drawable)
    for group in drawable:
        assert group.title in page.text("charts")
    assert_banner(screenshot(path, tmp_path, "real-run.png"), verdict)


@pytest.mark.root
def test_the_report_of_a_three_node_test_bed_with_one_slow_link(tmp_path):
    from tests.cluster.testbed import TestBed, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"multi-node test bed unavailable: {reason}")
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 is not installed")
    pytest.importorskip("matplotlib")
    with TestBed(3, rates={2: "2gbit"}) as bed:
        slow = bed.node(2).address
        hosts = bed.hosts_file(tmp_path / "hosts.txt", with_python=True)
        ssh = [arg for option in bed.ssh_options() for arg in ("--ssh-option", option)]
        # Bounded load: 2-second measurements, two streams, the ring of three links, twice.
        proc = run_preflight("run", "--nodes", str(hosts), *ssh, "--checks", "node.environment,net.bandwidth",
                             "--set", "net.bandwidth.min_gbps=4", "--set", "net.bandwidth.duration_s=2",
                             "--set", "net.bandwidth.streams=2", "--set", "net.bandwidth.repeats=2",
                             "--set", "net.bandwidth.omit_s=0", "--set", "net.bandwidth.pattern=ring",
                             "--out", "out", cwd=tmp_path, timeout=300)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    net = next(r for r in results["results"] if r["check_id"] == "net.bandwidth")
    assert net["status"] == "FAIL", proc.stdout + proc.stderr

    path = tmp_path / "out" / "report.html"
    page, console = open_report(path, tmp_path)
    assert console == []
    assert page.text("verdict").startswith("NO-GO")
    findings = page.text("findings")
    # The sentence and the heatmap come from net.bandwidth's declared link figures (figure="link").
    assert any(m.get("figure") == "link" for m in net["measurements"])
    assert re.search(rf"BLOCKS The slowest link, [\d.]+ -> [\d.]+, carries [\d.]+ Gbit/s, below the 4 Gbit/s "
                     r"the cluster needs\.", findings), findings
    assert slow in findings.split("slowest link,")[1].split("carries")[0]
    drawable = [g for g in figures.figure_groups(RunReport.from_dict(results)) if figures.drawable(g)]
    assert page.tags.get("svg", 0) == len(drawable) >= 1  # the link heatmap at least
    assert "across the cluster" in page.text("blocking")
    assert_banner(screenshot(path, tmp_path, "testbed-report.png"), "NO-GO")


def test_a_third_party_check_draws_its_chart_in_a_default_install(tmp_path):
    pytest.importorskip("preflight_example", reason="install tests/plugins/preflight-example (pip install -e)")
    proc = run_preflight("run", "--checks", "example.echo", "--out", "out", "--format", "html,json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page, console = open_report(tmp_path / "out" / "report.html", tmp_path)
    assert console == []
    assert page.tags.get("svg") == 1 and "Example: echo a status" in page.text("charts")
    assert "sha256 reaches" in page.text("findings") and "at 1 MiB" in page.text("findings")


def test_advice_follows_the_findings_that_fired(tmp_path):
    unreachable = make_result("gpu.visibility", "ghost", Status.ERROR, "cannot reach ghost: Could not resolve",
                              remediation=["Reseat or replace the missing GPU."])
    environment = make_result(
        "node.environment", "gpu01", Status.WARN, "hostname does not resolve",
        remediation=["Raise /dev/shm.", "Make the hostname resolve."],
        findings=[Finding("node.environment.shm", Status.PASS, "shm is 64 GiB", "Raise /dev/shm."),
                  Finding("node.environment.hostname", Status.WARN, "hostname does not resolve",
                          "Make `hostname -f` resolve.")])
    report = make_report([unreachable, environment], nodes=["gpu01"], fail_on="warn")
    report.nodes.append(NodeInfo("ghost", reachable=False, error="Could not resolve hostname ghost"))
    path = tmp_path / "report.html"
    path.write_text(html.render(report))
    page, console = open_report(path, tmp_path)
    assert console == []
    blocking = page.text("blocking")
    assert "ssh NAME true" in blocking and "Reseat" not in blocking
    assert "Make hostname -f resolve." in blocking and "/dev/shm" not in blocking  # a code span, no backticks
    assert "2 checks: 0 passed, 1 with warnings, 0 failed, 1 error, 0 skipped" in page.text("verdict")


def test_the_report_of_a_synthesised_1000_node_run(tmp_path):
    pytest.importorskip("matplotlib")
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_cluster_run", DATA / "reports" / "build_cluster_run.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    path = tmp_path / "report.html"
    path.write_text(html.render(builder.build_large(1000)))
    assert path.stat().st_size < 5_000_000

    page, console = open_report(path, tmp_path)
    assert console == []
    verdict = page.text("verdict")  # one plain sentence of what is wrong and what to do, the reasoning below
    assert verdict.startswith("NO-GO Not ready to train: ") and "2 blocking findings: " in verdict
    blocking = page.text("blocking")
    # The same finding on ten nodes is one entry naming them as a node set.
    assert "on gpu[0097,0194,0291,0388,0485,0582,0679,0776,0873,0970] (10 nodes)" in blocking
    assert "1000: gpu[0001-1000]" in page.text("glance")
    assert page.tags.get("tr", 0) < 400  # folded: not 7,000 results in 1,000-row tables
    assert_banner(screenshot(path, tmp_path, "report-1000-nodes.png"), "NO-GO")
