"""The results files: results.jsonl (a run-plan header, then one result per line as it arrives) and
results.json (the whole run report), read back and validated against the shipped JSON schema.

The header makes a results.jsonl self-describing: `preflight report results.jsonl` of a run that was
killed knows what was planned, and says what is missing instead of judging the results that made it.
A results file that does not match the schema is refused with the field named, never half-read.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from preflight.core.bounded import InputError, TooDeep, load_json, read_text
from preflight.core.finite import finite, make_finite
from preflight.core.model import CheckResult, RunReport, Scope
from preflight.core.redact import scrub

HEADER_KEY = "preflight_plan"
MAX_RESULTS_BYTES = 512 * 1024 * 1024  # 10,000 nodes' results are under 100 MiB
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schema" / "run-report.schema.json"


class ResultsFileError(ValueError):
    """A results file that cannot be read (exit 2); the message names the file, and the line or field."""


def dumps(data: Any, **options: Any) -> str:
    """Strict JSON: a NaN or infinity is refused here rather than written as a bare token."""
    return json.dumps(data, allow_nan=False, **options)


# What the run-plan header leaves out, as a plan has it: known only when the run ends.
PLAN_LEFT_OUT: dict[str, Any] = {"finished_at": "", "baseline": None, "incomplete": False, "incomplete_reason": "",
                                 "interrupted": False, "history": None}


def plan_header(report: RunReport) -> dict[str, Any]:
    """The first line of results.jsonl: the run report as planned, without results."""
    data = report.to_dict()
    for key in ("results", *PLAN_LEFT_OUT):
        data.pop(key, None)
    return {HEADER_KEY: data}


def read_results_jsonl(text: str, path: str, version: str) -> tuple[RunReport, list[str]]:
    """A RunReport from results.jsonl (its header's plan and the results that arrived), and notes.

    A last line cut short (the run was killed while writing it) is dropped with a note, and the rest
    is used; a bad line anywhere else is an error naming it. Without a header (an older preflight),
    the plan is rebuilt from the results, so missing results cannot be named.
    """
    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    header: dict[str, Any] | None = None
    results: list[CheckResult] = []
    notes: list[str] = []
    for index, (number, line) in enumerate(lines):
        try:
            try:
                data = load_json(line, f"{path}:{number}")
            except InputError as exc:
                raise ResultsFileError(str(exc)) from exc
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            if HEADER_KEY in data:
                if index != 0:
                    raise ValueError("a run-plan header after the first line")
                header = data[HEADER_KEY]
                if not isinstance(header, dict):
                    raise ValueError("the run-plan header is not a JSON object")
                # The fields a plan leaves out (they are known only at the end) are added for the check.
                validate_report({**PLAN_LEFT_OUT, **header, "results": []}, f"{path}:{number}")
                continue
            validate_result(data, f"{path}:{number}")
            results.append(CheckResult.from_dict(data))
        except ResultsFileError as exc:
            # A last line cut short is dropped; one nested too deep is whole, and refused like any other.
            if index == len(lines) - 1 and index > 0 and not isinstance(exc.__cause__, TooDeep):
                notes.append(f"dropped line {number} of {path}: it was cut short (the run was stopped while "
                             "writing it)")
                break
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            if index == len(lines) - 1 and index > 0:
                notes.append(f"dropped line {number} of {path}: it was cut short (the run was stopped while "
                             "writing it)")
                break
            raise ResultsFileError(f"{path}:{number}: not a preflight result: {exc}") from None
    if header is not None:
        try:
            report = RunReport.from_dict({**header, "results": []})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ResultsFileError(f"{path}:1: not a preflight run plan: {exc}") from None
        report.results = results
    else:
        report = RunReport(started_at=results[0].started_at if results else "", results=results,
                           planned=list(dict.fromkeys(r.check_id for r in results)),
                           cluster_checks=list(dict.fromkeys(r.check_id for r in results if r.scope is Scope.CLUSTER)),
                           preflight_version=version)
        notes.append(f"{path} has no run-plan header (written by an older preflight): missing results cannot be named")
    for result in results:
        make_finite(result)  # a file written by an older preflight may hold NaN tokens
        scrub(result)  # results join this report here, not through RunReport.add (preflight.core.redact)
    report.finished_at = results[-1].started_at if results else ""
    if header is None and any("cut short" in n for n in notes):
        # Without a plan, a torn line is the only sign that results are missing.
        report.incomplete, report.incomplete_reason = True, notes[0]
    return report, notes




def header_line(report: RunReport) -> str:
    return dumps(finite(plan_header(report))[0], sort_keys=True, default=str)


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _field(path: Any) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in path]
    return "".join(parts).lstrip(".") or "(top level)"


_COMPILED: dict[str, Any] = {}  # the schema, or a part of it, compiled once by jsonschema-rs


def fast_valid(data: Any, target: dict[str, Any], key: str) -> bool:
    """True when jsonschema-rs accepts `data` under `target` (compiled once per `key`): a 1,000-node
    results.json in a fortieth of a second, where jsonschema takes five. False when it refuses, cannot
    take a value (a NaN, an integer past 64 bits) or is not installed: jsonschema then decides, and
    names the field."""
    try:
        import jsonschema_rs
    except ImportError:
        return False
    try:
        validator = _COMPILED.get(key)
        if validator is None:
            validator = _COMPILED[key] = jsonschema_rs.validator_for(target)
        return bool(validator.is_valid(data))
    except Exception:  # noqa: BLE001 - whatever it cannot take, the exact check below reads
        return False


def _validate(data: Any, path: str, subschema: dict[str, Any] | None = None) -> None:
    import jsonschema

    whole = schema()
    target = whole if subschema is None else {**subschema, "$defs": whole["$defs"]}
    if fast_valid(data, target, repr(subschema)):
        return
    validator = jsonschema.Draft202012Validator(target)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        error = errors[0]
        raise ResultsFileError(f"{path} is not a preflight results file: field {_field(error.absolute_path)}: "
                               f"{error.message[:300]}")


def validate_report(data: Any, path: str) -> None:
    """ResultsFileError naming the first field of `data` that the run-report schema refuses, or that
    names a check the run did not plan (a damaged file must not drop what the verdict reads)."""
    _validate(data, path)
    planned = set(data.get("planned") or [])
    if not planned:
        return
    for field in ("expected", "cluster_checks", "needs", "pulled_in"):
        unknown = [cid for cid in data.get(field) or [] if cid not in planned]
        if unknown:
            raise ResultsFileError(f"{path}: field {field}: {unknown[0]!r} is not a planned check")


def validate_result(data: Any, path: str) -> None:
    """ResultsFileError naming the first field of a result line that the schema refuses."""
    _validate(data, path, {"$ref": "#/$defs/result"})


def parse_report(text: str, path: str) -> RunReport:
    """A RunReport from the text of a results.json, validated first."""
    try:
        data = load_json(text, path)
    except InputError as exc:
        raise ResultsFileError(str(exc)) from None
    validate_report(data, path)
    try:
        report = RunReport.from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ResultsFileError(f"{path} is not a preflight results file: {type(exc).__name__}: {exc}") from None
    for result in report.results:
        make_finite(result)  # a file written by an older preflight may hold NaN tokens
        scrub(result)  # results join this report here, not through RunReport.add (preflight.core.redact)
    return report


def read_results(path: str | Path, version: str) -> tuple[RunReport, list[str]]:
    """The run report in a results.json or results.jsonl, and notes on what was dropped."""
    name = str(path)
    try:
        text = read_text(path, MAX_RESULTS_BYTES)
    except InputError as exc:
        raise ResultsFileError(f"cannot read {name}: {exc.reason}" if exc.unreadable else str(exc)) from None
    if name.endswith(".jsonl"):
        return read_results_jsonl(text, name, version)
    return parse_report(text, name), []
