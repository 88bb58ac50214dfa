"""The advice for a node that lacks preflight names only options `preflight run` has."""

import re

from preflight.cli.run import run
from preflight.core.findings import install_fix, lacks_preflight, node_label
from preflight.engine.agent_stream import unreachable_words


class _Transport:
    kind, name, python = "ssh", "gpu07", "/opt/venv/bin/python"


def run_options() -> set[str]:
    return {opt for param in run.params for opt in param.opts if opt.startswith("--")}


def test_the_install_fix_names_ship_and_only_options_run_has():
    fix = install_fix("0.1.0")
    named = set(re.findall(r"--[a-z][a-z-]*", fix)) - {"--no-deps", "--user"}  # pip's own, in its commands
    assert "--ship" in named and named <= run_options(), named - run_options()


def test_a_node_reached_without_preflight_is_never_called_unreachable():
    words = unreachable_words(_Transport(), 1, False, "/opt/venv/bin/python: No module named preflight")
    assert lacks_preflight(words) and node_label(words) == "without preflight"
    assert "--ship" in words and set(re.findall(r"--[a-z][a-z-]*", words)) <= run_options()
    lost = unreachable_words(_Transport(), 255, True, "ssh: connect to host gpu07 port 22: No route to host")
    assert node_label(lost) == "unreachable"


def test_ship_without_nodes_is_a_usage_error_before_anything_is_made(tmp_path):
    from click.testing import CliRunner

    from preflight.cli.main import cli

    done = CliRunner().invoke(cli, ["run", "--ship", "--out", str(tmp_path / "out")])
    assert done.exit_code == 2 and "--ship" in done.output and "--nodes" in done.output
    assert not (tmp_path / "out").exists()
