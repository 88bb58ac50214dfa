"""A fuzz corpus for everything preflight reads from a user: results.json and results.jsonl,
baselines, preflight.toml, --set values and hosts files; and for what it must hold against any input:
silences that end on real dates, one node per sshd, node sets bounded before they are expanded, no
URL password in any text, names with control characters in valid JUnit and inert Markdown, and
plugins whose import raises anything.

Each input is a known-good document, mutated the way files get damaged: cut short, bytes inserted
or removed, a value replaced by one of another type, a field removed or misspelt. Every mutated
input must end in an exit code of 0 to 3 with a message, never a traceback, both through the real
command line (click's CliRunner) and through the functions the commands call. And no damage may
turn a run that is not GO into GO: a mutated document either says what the original said, or
something stricter, or is refused (exit 2 naming the file).

Inserted bytes are structural junk (brackets, quotes, commas, spaces, control and non-UTF-8
bytes), not digits, letters or comment marks: `600` becoming `60` or a line turned into a comment is
a different, valid document rather than a damaged one, and may well judge differently.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preflight.run.hosts import HostsFileError, load_hosts, parse_hosts
from preflight.cli.main import cli
from preflight.core import config as config_mod
from preflight.core.compare import attach
from preflight.core.config import ConfigError
from preflight.core.model import CLUSTER_NODE, CheckResult, Finding, Measurement, NodeInfo, RunReport, Scope, Status
from preflight.core.registry import discover
from preflight.core.results_file import ResultsFileError, header_line, read_results
from preflight.reporters import json_report
from tests.conftest import make_report, make_result

CHECKS = discover().checks
# Bounded for CI (the whole module runs in well under a minute); PREFLIGHT_FUZZ_EXAMPLES=2000 digs deeper.
FUZZ = settings(max_examples=int(os.environ.get("PREFLIGHT_FUZZ_EXAMPLES", "60")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
JUNK = st.binary(min_size=1, max_size=3).map(lambda b: bytes(JUNK_BYTES[x % len(JUNK_BYTES)] for x in b))
JUNK_BYTES = b'{}[]:,"\\ \t\n\x00\x07\xff\xc3='
HARD_JUNK_BYTES = b'{}[]:,"\\\x00\x07\xff='  # no white space: what replaces part of a name or number
HARD_JUNK = st.binary(min_size=1, max_size=3).map(
    lambda b: bytes(HARD_JUNK_BYTES[x % len(HARD_JUNK_BYTES)] for x in b))
OTHER_TYPE = {str: [1, True, [], {}], int: ["x", [], {}, True], float: ["x", [], {}], bool: ["x", 1, []],
              list: ["x", 1, {}], dict: ["x", 1, []]}


# -- the documents -------------------------------------------------------------------------------

def _base_reports() -> dict[str, RunReport]:
    bw = [Measurement("bandwidth", 40.0, "Gbit/s", 10.0, ">=", True)]
    fail = make_report([make_result("gpu.visibility", "n1", Status.PASS, measurements=bw),
                        make_result("net.bandwidth", CLUSTER_NODE, Status.FAIL, "slow link", scope=Scope.CLUSTER)],
                       nodes=["n1"])
    skip_expected = make_report([make_result("gpu.visibility", "n1", Status.PASS, measurements=bw),
                                 make_result("versions.consistency", CLUSTER_NODE, Status.SKIP, "one node",
                                             scope=Scope.CLUSTER)], nodes=["n1"], expected=["versions.consistency"])
    profile = make_report([make_result("node.environment", "n1", Status.PASS, measurements=bw),
                           make_result("collectives.local", "n1", Status.SKIP, "no GPU")],
                          profile="h100-8x", needs={"collectives.local": ["gpu"]})
    warn = make_report([make_result("node.environment", "n1", Status.WARN, "nofile low", measurements=bw)],
                       fail_on="warn")
    missing = make_report([make_result("node.environment", "n1", Status.PASS, measurements=bw)],
                          planned=["node.environment", "gpu.visibility"])
    load_error = make_report([make_result("node.environment", "n1", Status.PASS, measurements=bw)],
                             load_errors=[{"entry_point": "acme = acme:Check", "distribution": "acme 1",
                                           "error": "ImportError"}])
    nothing = make_report([make_result("gpu.visibility", "n1", Status.SKIP, "no GPU",
                                       findings=[Finding("gpu.visibility.no-gpu", Status.SKIP, "no GPU")])])
    interrupted = make_report([make_result("node.environment", "n1", Status.PASS, measurements=bw)],
                              incomplete=True, interrupted=True, incomplete_reason="interrupted")
    regressed = make_report([make_result("node.environment", "n1", Status.PASS,
                                         measurements=[Measurement("bandwidth", 20.0, "Gbit/s", 10.0, ">=", True)])])
    attach(regressed, make_report([make_result("node.environment", "n1", Status.PASS, measurements=bw)]),
           fail_on_regression=True)
    go = make_report([make_result("node.environment", "n1", Status.PASS, measurements=bw)])
    return {"fail": fail, "skip-expected": skip_expected, "profile": profile, "warn": warn, "missing": missing,
            "load-error": load_error, "nothing-measured": nothing, "interrupted": interrupted,
            "regressed": regressed, "go": go}


BASES = _base_reports()


def results_json(name: str) -> bytes:
    return json_report.render(BASES[name]).encode()


def results_jsonl(name: str) -> bytes:
    report = BASES[name]
    lines = [header_line(report)] + [r.to_json_line() for r in report.results]
    return ("\n".join(lines) + "\n").encode()


# -- mutations -----------------------------------------------------------------------------------

@st.composite
def byte_damage(draw, text: bytes) -> bytes:
    """Cut short, bytes inserted, or a span removed."""
    kind = draw(st.sampled_from(["cut", "insert", "remove", "replace"]))
    at = draw(st.integers(0, max(0, len(text) - 1)))
    if kind == "cut":
        return text[:at]
    if kind == "insert":
        return text[:at] + draw(JUNK) + text[at:]
    span = draw(st.integers(1, 8)) if kind == "remove" else 1
    removed = text[at:at + span]
    if any(chr(c).isalnum() or chr(c) in ".-+" for c in removed):
        # Part of a name or a number goes: something that cannot be read takes its place, never
        # nothing or a space (`600` must not silently become `60`).
        return text[:at] + draw(HARD_JUNK) + text[at + span:]
    return text[:at] + (b"" if kind == "remove" else draw(JUNK)) + text[at + span:]


def _paths(data, path=()):
    """Every (path, value) of a JSON document, facts excluded (the check's own free-form record)."""
    yield path, data
    if isinstance(data, dict):
        for key, value in data.items():
            if key not in ("facts", "verdict"):
                yield from _paths(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _paths(value, (*path, index))


@st.composite
def value_damage(draw, data: dict) -> dict:
    """A value replaced by one of another JSON type, a field removed, or a field misspelt."""
    data = copy.deepcopy(data)
    paths = [p for p, _ in _paths(data) if p]
    path = draw(st.sampled_from(paths))
    parent = data
    for step in path[:-1]:
        parent = parent[step]
    key = path[-1]
    value = parent[key]
    kind = draw(st.sampled_from(["type", "remove", "misspell"] if isinstance(parent, dict) else ["type"]))
    if kind == "type":
        choices = next((v for t, v in OTHER_TYPE.items() if type(value) is t), ["x", 1])
        parent[key] = draw(st.sampled_from(choices))
    elif kind == "remove":
        del parent[key]
    else:
        parent[f"{key}_"] = parent.pop(key)
    return data


# -- running it ----------------------------------------------------------------------------------

def invoke(args: list[str]) -> tuple[int, str]:
    done = CliRunner().invoke(cli, args)
    assert done.exception is None or isinstance(done.exception, SystemExit), (
        f"{args}: {type(done.exception).__name__}: {done.exception}\n{done.output}")
    assert done.exit_code in (0, 1, 2, 3, 130), done.output
    assert done.output.strip(), "an exit with no message"
    assert "Traceback" not in done.output
    return done.exit_code, done.output


def report_exit(content: bytes, suffix: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in" / f"results{suffix}"
        path.parent.mkdir()
        path.write_bytes(content)
        try:
            read_results(path, "0.1.0")  # the function itself: its own error or a report, nothing else
        except ResultsFileError as exc:
            assert str(path) in str(exc)
        code, _ = invoke(["report", str(path), "--format", "json", "--out", str(Path(tmp) / "out")])
    return code


@lru_cache(maxsize=None)
def original_exit(name: str, suffix: str) -> int:
    return report_exit(results_json(name) if suffix == ".json" else results_jsonl(name), suffix)


def assert_no_new_go(mutated: int, name: str, suffix: str) -> None:
    if mutated == 0:
        assert original_exit(name, suffix) == 0, f"damage turned a {name} run into GO"


# -- results files -------------------------------------------------------------------------------

@FUZZ
@given(st.sampled_from(sorted(BASES)), st.data())
def test_damaged_results_json_never_crashes_and_never_turns_go(name, data):
    text = results_json(name)
    if data.draw(st.booleans()):
        mutated = data.draw(byte_damage(text))
    else:
        mutated = json.dumps(data.draw(value_damage(json.loads(text)))).encode()
    assert_no_new_go(report_exit(mutated, ".json"), name, ".json")


@FUZZ
@given(st.sampled_from(sorted(BASES)), st.data())
def test_damaged_results_jsonl_never_crashes_and_never_turns_go(name, data):
    text = results_jsonl(name)
    if data.draw(st.booleans()):
        mutated = data.draw(byte_damage(text))
    else:
        lines = text.decode().splitlines()
        index = data.draw(st.integers(0, len(lines) - 1))
        lines[index] = json.dumps(data.draw(value_damage(json.loads(lines[index]))))
        mutated = ("\n".join(lines) + "\n").encode()
    assert_no_new_go(report_exit(mutated, ".jsonl"), name, ".jsonl")


# -- baselines -----------------------------------------------------------------------------------

def diff_exit(old: bytes, new: bytes) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "old.json").write_bytes(old)
        (Path(tmp) / "new.json").write_bytes(new)
        code, _ = invoke(["diff", str(Path(tmp) / "old.json"), str(Path(tmp) / "new.json")])
    assert code in (0, 1, 2)
    return code


@FUZZ
@given(st.data())
def test_a_damaged_baseline_never_crashes_and_never_hides_a_regression(data):
    baseline = make_report([make_result("node.environment", "n1", Status.PASS,
                                        measurements=[Measurement("bandwidth", 90.0, "Gbit/s", 10.0, ">=", True)]),
                            make_result("gpu.visibility", "n1", Status.PASS)])
    new = make_report([make_result("node.environment", "n1", Status.PASS,
                                   measurements=[Measurement("bandwidth", 40.0, "Gbit/s", 10.0, ">=", True)]),
                       make_result("gpu.visibility", "n1", Status.FAIL)])
    old_text, new_text = json_report.render(baseline).encode(), json_report.render(new).encode()
    assert diff_exit(old_text, new_text) == 1
    if data.draw(st.booleans()):
        damaged = data.draw(byte_damage(old_text))
    else:
        damaged = json.dumps(data.draw(value_damage(json.loads(old_text)))).encode()
    assert diff_exit(damaged, new_text) != 0, "a damaged baseline hid the regressions"


# -- preflight.toml and --set ---------------------------------------------------------------------

def rejudged_run() -> bytes:
    """A recorded run that is GO with the checks' defaults and NO-GO with CONFIG or SETTINGS."""
    from tests.unit.run.test_rejudge import recorded_run

    report = recorded_run()
    report.results = [r for r in report.results if r.check_id != "checkpoint.roundtrip"]
    report.planned = [c for c in report.planned if c != "checkpoint.roundtrip"]
    return json_report.render(report).encode()


RUN = rejudged_run()
CONFIG = b"""[expect]
gpus_per_node = 8

[checks."collectives.local"]
min_busbw_gbps = 600.0
busbw_size_bytes = 17179869184
"""
SETTINGS = ["collectives.local.min_busbw_gbps=600", "collectives.local.busbw_size_bytes=17179869184",
            "expect.gpus_per_node=8"]


def rejudge_exit(config: bytes | None, settings_: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run" / "results.json"
        run.parent.mkdir()
        run.write_bytes(RUN)
        args = ["report", str(run), "--rejudge", "--format", "json", "--out", str(Path(tmp) / "out")]
        if config is not None:
            (Path(tmp) / "preflight.toml").write_bytes(config)
            args += ["--config", str(Path(tmp) / "preflight.toml")]
            try:  # the function itself: a ConfigError naming the file, or a config
                config_mod.load(Path(tmp) / "preflight.toml", CHECKS)
            except ConfigError as exc:
                assert "preflight.toml" in str(exc)
        for setting in settings_:
            args += ["--set", setting]
        try:
            config_mod.apply_cli_settings(config_mod.Config(), settings_, CHECKS)
        except ConfigError as exc:
            assert "--set" in str(exc)
        code, _ = invoke(args)
    return code


def test_the_undamaged_config_and_settings_are_not_go():
    assert rejudge_exit(None, []) == 0  # the recorded run itself is GO
    assert rejudge_exit(CONFIG, []) == 1 and rejudge_exit(None, SETTINGS) == 1


@FUZZ
@given(st.data())
def test_a_damaged_config_file_never_crashes_and_never_turns_go(data):
    damaged = data.draw(byte_damage(CONFIG).filter(lambda t: len(t) != len(CONFIG) or t != CONFIG))
    if damaged and not CONFIG.startswith(damaged):  # cut short at a line end is a shorter valid file
        assert rejudge_exit(damaged, []) != 0


@FUZZ
@given(st.data())
def test_damaged_set_values_never_crash_and_never_turn_go(data):
    index = data.draw(st.integers(0, len(SETTINGS) - 1))
    damaged = data.draw(byte_damage(SETTINGS[index].encode())).decode("utf-8", "replace")
    if not SETTINGS[index].startswith(damaged) or not damaged:
        settings_ = [*SETTINGS[:index], damaged, *SETTINGS[index + 1:]]
        assert rejudge_exit(None, settings_) != 0


# -- hosts files ---------------------------------------------------------------------------------

HOSTS = b"""# the training nodes
gpu01 slots=8
admin@gpu02:2222 slots=8
gpu03 python=/opt/venv/bin/python
"""


@FUZZ
@given(st.data())
def test_a_damaged_hosts_file_never_crashes(data):
    damaged = data.draw(byte_damage(HOSTS))
    with tempfile.TemporaryDirectory() as tmp:
        hosts = Path(tmp) / "hosts.txt"
        hosts.write_bytes(damaged)
        try:
            load_hosts(hosts)
        except HostsFileError as exc:
            assert "hosts.txt" in str(exc)
        (Path(tmp) / "afile").write_text("x")
        # An --out below a file stops the run after the hosts file is read and before any node is
        # contacted: a bad hosts file is exit 2 naming it, a good one exit 2 naming the --out.
        code, output = invoke(["run", "--nodes", str(hosts), "--checks", "node.environment",
                               "--out", str(Path(tmp) / "afile" / "out")])
    assert code == 2 and ("hosts.txt" in output or "afile" in output), output


# -- silences: an end that is not a date never means "never expires" ----------------------------

UNTILS = st.one_of(st.text(max_size=24).map(lambda t: json.dumps(t, ensure_ascii=False)), st.integers(-10**9, 10**9).map(str),
                   st.sampled_from(["true", "false", "0", "[]", "{}", "2027-01-31", "2027-01-31T10:00:00",
                                    '"2027-02-30"', '"2027-1-5"', '"20270131"', "1979-05-27 07:32:00Z"]))


@FUZZ
@given(UNTILS)
def test_a_silence_ends_on_a_date_or_is_refused_naming_its_key(until):
    from preflight.core.silence import parse_silence  # noqa: F401 - the reader under test, through parse

    text = f'[silence]\n"node.environment.shm-small" = {{reason = "r", until = {until}}}\n'
    try:
        config = config_mod.parse(text, CHECKS)
    except ConfigError as exc:
        assert "silence.node.environment.shm-small" in str(exc) or "invalid TOML" in str(exc), str(exc)
        return
    end = config.silence["node.environment.shm-small"]["until"]
    assert len(end) == 10 and end[4] == end[7] == "-"  # a real date, never ""


# -- a silence accepts only what a check declares and measured -----------------------------------

SILENCE_IDS = st.one_of(
    st.sampled_from(["node.environment.could-not-measure", "node.environment.crashed", "node.environment.error",
                     "node.environment.unreachable", "node.environment.timed-out", "example.echo.anything",
                     "example.echo.error", "node.environment.\uff53hm-small", "node.environment.shm-smal1",
                     "\uff4eode.environment.shm-small", "node.environment.shm-small\u200b"]),
    st.text(max_size=30).map(lambda t: "node.environment." + t.replace('"', "").replace("\\", "")))


@FUZZ
@given(SILENCE_IDS)
def test_a_silence_of_an_id_no_check_declares_or_of_what_measured_nothing_is_refused_naming_it(finding_id):
    from preflight.core.silence import declared_ids

    declared = {i for c in CHECKS.values() for i in declared_ids(c)}
    text = f'[silence]\n"{finding_id}" = {{reason = "r"}}\n'
    try:
        config = config_mod.parse(text, CHECKS)
    except ConfigError as exc:
        assert finding_id in str(exc) or "invalid TOML" in str(exc), str(exc)
        return
    assert set(config.silence) <= declared, config.silence  # accepted: an id a check declares


# -- a subset is the run's own answer, never the file's ---------------------------------------------

SUBSETS = st.fixed_dictionaries({
    "shape": st.one_of(st.sampled_from(["nodes-multiple-of=2", "nodes-multiple-of=3", "within=group", "x=1", ""]),
                       st.text(max_size=12)),
    "offered": st.booleans(), "nodes": st.lists(st.sampled_from(["n1", "n2", "n3", "ghost", ""]), max_size=5),
    "exclude": st.lists(st.sampled_from(["n1", "n2", "ghost"]), max_size=3), "total": st.integers(-1, 9),
    "why_not": st.text(max_size=8), "groups": st.dictionaries(st.sampled_from(["n1", "n2", "ghost"]), st.text(max_size=4))})


@FUZZ
@given(SUBSETS, st.booleans())
def test_report_never_keeps_a_subset_read_from_the_file(subset, broken_link):
    results = [CheckResult("node.environment", n, Status.PASS, "fine") for n in ("n1", "n2", "n3")]
    if broken_link:  # blocking, pinned on no node: no subset can be offered
        results.append(CheckResult("net.bandwidth", CLUSTER_NODE, Status.FAIL, "slow", scope=Scope.CLUSTER,
                                   findings=[Finding("net.bandwidth.slow-link", Status.FAIL, "slow", "fix")]))
    report = RunReport(started_at="2026-12-01T00:00:00+00:00", nodes=[NodeInfo(n) for n in ("n1", "n2", "n3")],
                       planned=sorted({r.check_id for r in results}), results=results,
                       cluster_checks=["net.bandwidth"] if broken_link else [], subset=subset)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "results.json").write_text(json.dumps(report.to_dict(), allow_nan=False))
        done = CliRunner().invoke(cli, ["report", str(Path(tmp) / "results.json"), "--format", "json", "--out",
                                        str(Path(tmp) / "again")])
        written = json.loads((Path(tmp) / "again" / "results.json").read_text()).get("subset") or {}
    assert "ghost" not in json.dumps(written.get("nodes")), written
    # Three healthy nodes: GO (4 where the recorded shape leaves one out), or NO-GO for the link.
    assert done.exit_code == 1 if broken_link else done.exit_code in (0, 4), done.output
    assert done.exit_code != 4 or (set(written["nodes"]) <= {"n1", "n2", "n3"} and written["exclude"])


# -- one node is one node ------------------------------------------------------------------------

@FUZZ
@given(st.sampled_from(["gpu01", "10.0.0.7", "[fd00::7]", "node-a.example"]), st.data())
def test_two_spellings_of_one_sshd_are_always_refused(host, data):
    def spelling() -> str:
        name = host.upper() if data.draw(st.booleans()) and not host.startswith("[") else host
        if data.draw(st.booleans()) and not name.startswith("[") and not name[-1].isdigit():
            name += "."
        if data.draw(st.booleans()):
            name += ":22"
        return (data.draw(st.sampled_from(["", "root@", "alice@"])) + name)

    first, second = spelling(), spelling()
    try:
        parse_hosts(f"{first}\n{second}\n", "hosts.txt")
    except HostsFileError as exc:
        assert str(exc).startswith("hosts.txt:2: duplicate host"), str(exc)
    else:
        raise AssertionError(f"{first!r} and {second!r} were taken for two nodes")


# -- bounded work: node sets ---------------------------------------------------------------------

@FUZZ
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)), min_size=1, max_size=3))
def test_a_node_set_is_refused_or_expanded_within_the_limit(bounds):
    from preflight.core.nodeset import MAX_NODES
    from preflight.core.nodeset import NodeSetError, expand

    pattern = "n" + "-".join(f"[{min(a, b)}-{max(a, b)}]" for a, b in bounds)
    try:
        names = expand(pattern)
    except NodeSetError:
        names = None
    assert names is None or len(names) <= MAX_NODES
    try:
        hosts = parse_hosts(pattern, "--nodes")
    except HostsFileError:
        hosts = None
    assert hosts is None or len(hosts) <= MAX_NODES


# -- no secret in any output: URLs of every shape --------------------------------------------------

SECRET = "Pl4nted"
URL_PARTS = st.tuples(st.sampled_from(["http", "https", "postgresql", "postgresql+psycopg", "mysql"]),
                      st.text(alphabet="abcxyz_.-%", min_size=1, max_size=6),
                      st.text(alphabet="abc123!$&'()*+,;=@:/?#[]~", max_size=6),
                      st.sampled_from(["db", "127.0.0.1", "[::1]", "[::1", "h.example"]),
                      st.sampled_from(["", ":5432", ":5x32", ":99999", ":"]),
                      st.sampled_from(["", "/h", "/api?x=1", "/?token=", "/p?api_key="]))


@FUZZ
@given(URL_PARTS, st.sampled_from(["{url}", 'url = "{url}"', "cannot reach {url}: refused", "{url}\n{url}"]))
def test_a_password_in_any_url_is_masked(parts, context):
    from preflight.core.redact import redact_text

    scheme, user, noise, host, port, tail = parts
    password = noise + SECRET + noise
    url = f"{scheme}://{user}:{password}@{host}{port}{tail}" + (SECRET if tail.endswith("=") else "")
    assert SECRET not in redact_text(context.format(url=url), assignments=True), url


# -- every machine-readable output valid: names with control characters ----------------------------

CONTROL_TEXT = st.text(alphabet=st.sampled_from(list("ab-1\x00\x07\x1b[2J\r\n\t\x7f\x85\u202e\ud800\ufffe<&\"]]>")),
                       min_size=1, max_size=12)


@FUZZ
@given(CONTROL_TEXT, CONTROL_TEXT, CONTROL_TEXT)
def test_control_characters_in_names_and_commands_never_break_an_output(node, plugin, command):
    import re
    import xml.etree.ElementTree as ET

    from preflight.core.model import Evidence
    from preflight.reporters import junit, markdown

    result = make_result("node.environment", node, Status.FAIL, f"bad {node}",
                         evidence=[Evidence(command, 1, f"out {command}")])
    report = make_report([result], nodes=[node], command=f"preflight run {command}",
                         load_errors=[{"entry_point": f"{plugin} = m:C", "distribution": f"{plugin} 1.0",
                                       "error": f"boom {plugin}"}])
    xml_text = junit.render(report)
    ET.fromstring(xml_text.encode("utf-8"))  # valid XML, whatever the names hold
    md = markdown.render(report)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e\ud800-\udfff\ufffe]", md), md


# -- plugins contained at import -----------------------------------------------------------------

RAISED = st.sampled_from(["SystemExit", "KeyboardInterrupt", "GeneratorExit", "RecursionError", "MemoryError",
                          "StopIteration", "Exception", "BaseException", "type('Odd', (BaseException,), {})"])
PAYLOAD = st.sampled_from(["", "0", "1", "3", "None", "'bye'", "[1, 2]", "object()"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(RAISED, PAYLOAD, st.sampled_from(["raise", "sys.exit", "os._exit"]))
def test_whatever_a_plugin_raises_at_import_is_a_load_error_naming_it(tmp_path_factory, raised, payload, via):
    import sys

    from tests.unit.core.test_plugin_import import plant

    site = tmp_path_factory.mktemp("site")
    sys.path.insert(0, str(site))
    try:
        # os._exit() of a plugin imported in this process is a SystemExit of its thread (registry._kept).
        body = {"sys.exit": f"import sys\nsys.exit({payload})\n", "os._exit": f"import os\nos._exit({payload or 0})\n",
                "raise": f"raise ({raised})({payload})\n"}[via]
        check_id = plant(site, body)
        found = discover(only={check_id})
    finally:
        sys.path.remove(str(site))
    assert [e.entry_point.split(" =")[0] for e in found.errors] == [check_id]
    assert found.errors[0].distribution.startswith("hostile-")


# -- no secret in any output: userinfo without a scheme, quotes, query keys -------------------------

SCHEME_LESS = st.tuples(st.sampled_from(["http://", "postgresql+psycopg://", "://", ""]),
                        st.text(alphabet="abcxyz_.-%", min_size=1, max_size=6),
                        st.text(alphabet="abc123!$&'\"()*+,;=@:/?#[]~`", max_size=6),
                        st.sampled_from(["db", "127.0.0.1", "[::1]", "h.example"]),
                        st.sampled_from(["", ":5432", "/h", "/h?x=1"]))
SECRET_QUERY_KEYS = ["token", "apitoken", "access_token", "jwt", "session", "key", "signature", "password",
                     "secret", "auth", "api_key", "x-api-key", "sig", "X-Amz-Credential", "client_secret"]


@FUZZ
@given(SCHEME_LESS, st.sampled_from(["{url}", "url = '{url}'", 'history store {url}: refused', "{url} slots=8",
                                      "[{url}]", "{{'url': \"{url}\"}}"]))
def test_a_password_in_userinfo_of_any_form_is_masked(parts, context):
    from preflight.core.redact import redact_text

    scheme, user, noise, host, tail = parts
    url = f"{scheme}{user}:{noise}{SECRET}{noise}@{host}{tail}"
    assert SECRET not in redact_text(context.format(url=url), assignments=True), url


@FUZZ
@given(st.sampled_from(SECRET_QUERY_KEYS), st.booleans(), st.sampled_from(["?", "&", ";"]),
       st.sampled_from(["", "&query=up", "#frag", " and more"]))
def test_a_token_in_any_query_key_is_masked(key, upper, sep, tail):
    from preflight.core.redact import redact_text

    key = key.upper() if upper else key
    text = f"https://prom:9090/api/v1/query?x=1{sep}{key}={SECRET}{tail}"
    assert SECRET not in redact_text(text), text


# -- bounded work: nesting, aliases, devices, wrongly typed nodes, pins on one line ---------------

BOUNDED = settings(max_examples=int(os.environ.get("PREFLIGHT_FUZZ_EXAMPLES", "60")) // 4 or 1, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow])
NESTING = st.tuples(st.integers(65, 100_000), st.sampled_from(["[", '{"a": ', '{"items": [', "[{}, "]))


def _nested(depth: int, opener: str) -> str:
    closer = {"[": "]", '{"a": ': "}", '{"items": [': "]}", "[{}, ": "]"}[opener]
    return opener * depth + "1" + closer * depth


@BOUNDED
@given(NESTING)
def test_json_nested_past_the_limit_is_exit_2_naming_the_file_in_every_command(nesting):
    text = _nested(*nesting)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "deep.json"
        path.write_text(text)
        for args in (["report", str(path), "--out", f"{tmp}/out"], ["diff", str(path), str(path)],
                     ["history", "import", "--url", f"{tmp}/h.sqlite", str(path)], ["alerts", "--from", str(path)],
                     ["alerts", "--check", str(path)], ["k8s", "judge", str(path)]):
            code, output = invoke(args)
            assert code == 2 and "deep.json" in output, (args, output[-300:])


@BOUNDED
@given(st.integers(65, 100_000), st.sampled_from(["[", "{a="]))
def test_toml_nested_past_the_limit_is_refused_naming_the_file(depth, opener):
    closer = {"[": "]", "{a=": "}"}[opener]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "preflight.toml"
        path.write_text(f"x = {opener * depth}1{closer * depth}\n".replace("[1]", "[]"))
        try:
            config_mod.load(str(path), CHECKS)
        except ConfigError as exc:
            assert "preflight.toml" in str(exc)
        else:
            raise AssertionError("a config nested past the limit was read")


@BOUNDED
@given(st.integers(1, 9), st.integers(2, 9))
def test_a_yaml_alias_is_refused_whatever_it_expands_to(levels, width):
    lines = ["a0: &a0 [x, x]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.yml"
        path.write_text("\n".join(lines) + f"\ngroups: [*a{levels}]\n")
        for args in (["alerts", "--check", str(path)], ["k8s", "judge", str(path)]):
            code, output = invoke(args)
            assert code == 2 and "rules.yml" in output, (args, output[-300:])


NODE = {"apiVersion": "v1", "kind": "List", "items": [
    {"kind": "Node", "metadata": {"name": "gpu-a", "labels": {"role": "train"}},
     "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}], "unschedulable": False},
     "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "conditions": [{"type": "Ready", "status": "True"}]}}]}


@FUZZ
@given(st.data(), st.sampled_from(["", "\x1b]0;t\x07", "\x1b[2J", "\r", "\u202e", "\x00"]))
def test_a_damaged_node_list_is_judged_or_refused_and_never_prints_an_escape(data, escape):
    doc = data.draw(value_damage(NODE))
    text = json.dumps(doc).replace("gpu-a", f"gpu{escape}-a")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nodes.json"
        path.write_text(text)
        code, output = invoke(["k8s", "judge", str(path)])
    assert code in (0, 1, 2)
    assert not any(c in output for c in "\x1b\x07\r\u202e\x00"), output


@FUZZ
@given(st.lists(st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True), min_size=1, max_size=200, unique=True),
       st.sampled_from(['"', "'"]))
def test_pins_on_one_line_all_get_that_line(names, quote):
    from preflight_checks.versions.pins import read_requirements

    deps = ", ".join(f"{quote}{name}=={i}.0{quote}" for i, name in enumerate(names))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pyproject.toml"
        path.write_text(f'[project]\nname = "x"\ndependencies = [{deps}]\n')
        entries = read_requirements([str(path)])["entries"]
    assert [e["where"] for e in entries] == [f"{path}:3"] * len(names)


ENDINGS = st.sampled_from(["import os\nos._exit({code})\n", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
                           "import sys\nsys.exit({code})\n", "import os\nos.chdir('/')\nprint('GO')\nos._exit({code})\n"])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(ENDINGS, st.integers(0, 3), st.booleans())
def test_a_plugin_that_ends_its_importer_is_named_by_the_child_and_never_imported_here(tmp_path_factory, ending,
                                                                                      code, needed):
    import sys

    from preflight.core.registry import needed_by
    from preflight.transport.plugins import discover as discover_apart
    from tests.unit.core.test_plugin_import import plant

    site = tmp_path_factory.mktemp("site")
    sys.path.insert(0, str(site))
    cwd = os.getcwd()
    try:
        check_id = plant(site, ending.format(code=code))
        found = discover_apart(only={check_id}, need=needed_by([check_id] if needed else []))
    finally:
        sys.path.remove(str(site))
    assert os.getcwd() == cwd
    assert [e.entry_point.split(" =")[0] for e in found.errors] == [check_id], found.errors
    assert "SystemExit" in found.errors[0].error or "ended the process" in found.errors[0].error
