"""Discovery through the `preflight.checks` entry-point group, with real installed distributions."""

import json
import os
import textwrap

import pytest

from tests.conftest import run_preflight


def test_installed_example_plugin_is_listed_and_runs(tmp_path):
    pytest.importorskip("preflight_example", reason="install tests/plugins/preflight-example (pip install -e)")
    listing = run_preflight("list", cwd=tmp_path)
    assert listing.returncode == 0
    for check_id in ("example.echo", "example.sleep", "example.crash", "node.environment"):
        assert check_id in listing.stdout
    explained = run_preflight("explain", "example.echo", cwd=tmp_path)
    assert "from preflight-example-plugin 1.0.0" in explained.stdout
    run = run_preflight("run", "--checks", "example.echo", "--set", 'example.echo.text="hello from a plugin"',
                        "--format", "json", "--out", "out", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    assert result["summary"] == "hello from a plugin"


def test_a_reporter_plugin_gets_a_format_name_and_writes_its_file(tmp_path):
    pytest.importorskip("preflight_example", reason="install tests/plugins/preflight-example (pip install -e)")
    from preflight.reporters import available

    assert {"json", "md", "html", "junit", "prometheus", "example-csv"} <= set(available())
    assert available()["example-csv"].distribution == "preflight-example-plugin 1.0.0"
    run = run_preflight("run", "--checks", "example.echo", "--format", "example-csv,json", "--out", "out", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert rows[0] == "check,node,status,summary" and rows[1].startswith("example.echo,")
    unknown = run_preflight("run", "--checks", "example.echo", "--format", "example-xls", "--out", "o2", cwd=tmp_path)
    assert unknown.returncode == 2 and "example-xls" in unknown.stderr and "example-csv" in unknown.stderr


def make_distribution(site, name, entry_points, modules):
    """A real installed distribution as importlib.metadata finds it: a .dist-info folder plus code."""
    dist_info = site / f"{name.replace('-', '_')}-0.3.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.3\n")
    (dist_info / "entry_points.txt").write_text("[preflight.checks]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))


def test_a_plugin_that_fails_to_import_is_named_and_the_run_goes_on(tmp_path):
    site = tmp_path / "site"
    make_distribution(site, "acme-gpu-checks", {"acme.broken": "acme_broken:Check", "acme.wrong": "acme_wrong:NotACheck"},
                      {"acme_broken": "import does_not_exist_anywhere\n", "acme_wrong": "class NotACheck: pass\n"})
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    listing = run_preflight("list", cwd=tmp_path, env=env)
    assert listing.returncode == 0
    assert "acme.broken = acme_broken:Check (acme-gpu-checks 0.3)" in listing.stderr
    assert "No module named 'does_not_exist_anywhere'" in listing.stderr
    assert "is not a preflight.core.check.Check subclass" in listing.stderr
    run = run_preflight("run", "--checks", "node.environment", "--format", "json,md", "--out", "out",
                        cwd=tmp_path, env=env)
    # The run goes on, but its verdict cannot be GO: the plugin's checks did not run (exit 3,
    # unless a check that did run blocks).
    assert run.returncode in (1, 3), run.stderr
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["verdict"]["reason"].startswith("check plugins failed to load: acme.broken (acme-gpu-checks 0.3)")
    assert [r["check_id"] for r in data["results"]] == ["node.environment"]
    assert {e["distribution"] for e in data["load_errors"]} >= {"acme-gpu-checks 0.3"}
    assert "acme-gpu-checks 0.3" in (tmp_path / "out" / "report.md").read_text()
    asked = run_preflight("run", "--checks", "acme.broken", "--out", "out2", cwd=tmp_path, env=env)
    assert asked.returncode == 2 and "its plugin failed to load" in asked.stderr
    excluded = run_preflight("run", "--checks", "node.environment", "--skip", "acme.broken,acme.wrong", "--format",
                             "json", "--out", "out3", cwd=tmp_path, env=env)
    assert excluded.returncode in (0, 1), excluded.stdout + excluded.stderr
    assert json.loads((tmp_path / "out3" / "results.json").read_text())["load_errors"] == []
