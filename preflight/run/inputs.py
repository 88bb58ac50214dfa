"""What a run reads from the user, checked before anything runs: check ids and tags, report formats,
the output directory, a results file. Each problem is a RunProblem naming the flag or the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from preflight.run.request import RunProblem

DEFAULT_OUT = "preflight-report"


def split_ids(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def nonempty(flag: str, value: str) -> None:
    if not value.strip() or (flag == "--checks" and not split_ids(value)):
        raise RunProblem(f"{flag} is empty; give {'a directory' if flag == '--out' else 'check ids'} or leave "
                         f"{flag} out")


def plugin_name(error: Any) -> str:
    """The check id a plugin that failed to load would have had (its entry point's name)."""
    return str(error.entry_point).split(" =")[0]


def check_ids_known(found: Any, wanted: list[str], skipped: set[str]) -> None:
    """RunProblem for an id in --checks or --skip that no check has (naming its plugin when it failed to load)."""
    for check_id in [*wanted, *skipped]:
        if check_id not in found.checks:
            hint = ""
            broken = [e for e in found.errors if plugin_name(e) == check_id]
            if check_id in skipped and check_id in getattr(found, "not_imported", {}):
                continue  # --skip of a third party's plugin: never imported
            if broken and check_id in skipped:
                continue  # --skip of a plugin that failed to load: the user knows, its absence is no gap
            if broken:
                hint = f" (its plugin failed to load: {broken[0].error})"
            from preflight.core.suggest import suggest

            hint = hint or suggest(check_id, found.checks)
            raise RunProblem(f"unknown check id {check_id!r}{hint}; `preflight list` shows the known ones")


def tagged(wanted: list[str], tags: list[str], checks: dict[str, Any]) -> list[str]:
    """The wanted checks that carry any of the tags; a tag no check has is a usage error."""
    if not tags:
        return wanted
    from preflight.core.suggest import suggest

    known = {t for c in checks.values() for t in c.tags}
    for tag in tags:
        if tag not in known:
            raise RunProblem(f"no check has the tag {tag!r}{suggest(tag, known)} (tags: {', '.join(sorted(known))})")
    chosen = [cid for cid in wanted if set(checks[cid].tags) & set(tags)]
    if not chosen:
        raise RunProblem(f"no check selected has the tag{'s' if len(tags) > 1 else ''} {', '.join(tags)}")
    return chosen


def formats_known(chosen: list[str]) -> list[str]:
    """The report formats asked for, each one an installed reporter's."""
    from preflight.reporters import available, refused

    for fmt in chosen:
        if fmt in refused():
            raise RunProblem(refused()[fmt])
    unknown = [f for f in chosen if f not in available()]
    if unknown:
        raise RunProblem(f"unknown report format {', '.join(unknown)}; choose from {', '.join(available())} "
                         "(formats are plugins of the preflight.reporters entry-point group)")
    return chosen


def output_dir(path: str | None, inputs: list[tuple[str, str | None]] | None = None,
               formats: list[str] | None = None) -> Path:
    """The run's own directory (see preflight/run/outdir.py): a new one per run without --out.

    `inputs` are the (flag, path) of the files the command reads: an --out whose report files would
    replace one of them is a usage error. `formats` are the formats to be written."""
    from preflight.reporters import filename
    from preflight.run.outdir import RESULTS_LOG, OutputDirError, run_directory

    if path is not None:
        nonempty("--out", path)
    if path == "-":
        raise RunProblem("--out - prints one report and is for `preflight report`; a run writes a directory")
    try:
        return run_directory(path or DEFAULT_OUT, per_run=path is None,
                             inputs=[(flag, given) for flag, given in inputs or [] if given],
                             writes=[RESULTS_LOG, *(filename(f) for f in formats or [])])
    except OutputDirError as exc:
        raise RunProblem(str(exc)) from None


def read_report(path: str, checks: Any) -> tuple[Any, list[str]]:
    """(the run report of a results.json or results.jsonl, notes on reading it); RunProblem naming the
    file and field when it is not one. `checks`: the installed checks, or a function of the report's
    check ids that gives them (so that only those are imported)."""
    from preflight import __version__
    from preflight.core.results_file import ResultsFileError, read_results
    from preflight.engine.head import fill_declarations

    try:
        report, notes = read_results(path, __version__)
    except ResultsFileError as exc:
        raise RunProblem(str(exc)) from None
    fill_declarations(report, checks(list(report.check_ids)) if callable(checks) else checks)  # a results file older than the recorded declarations
    return report, list(notes)
