"""Fleet memory: every run recorded, so that figures have a past and nodes a record.

- store.py     the database (SQLite file by default, PostgreSQL by URL), its migrations, ingest
- extract.py   what is kept of a run report: pure functions over results.json
- outliers.py  nodes that lag identical peers within one run (fleet.outlier findings)
- queries.py   runs, trends, nodes and lemons
- compare.py   what an image change did to each figure (Mann-Whitney U)
- context.py   where a new run's headline figures stand among earlier runs, for its report
- learn.py     profile floors learned from healthy runs
- the commands, `preflight history ...` and `preflight baseline learn`, are in preflight/cli/history.py

The functions a run needs are importable from here without loading the database layer until they
are called, so that `import preflight.history` costs a run nothing:

    warning = record_run(report.to_dict(), url=None)   # None, or one line to show as a warning
    findings = outlier_findings(report.to_dict())      # preflight.core.model.Finding, id fleet.outlier
    context = context_for_report(store, report_dict)   # percentile per headline figure, image changes
    context, warning = report_context(report_dict, url=None)   # the same, from the store at url; never raises
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def record_run(report: dict[str, Any], url: str | Path | None = None, **options: Any) -> str | None:
    """Record a run in fleet history; never raises. Returns None, or the warning to show."""
    try:
        from preflight.history.store import record_run as record
    except Exception as exc:  # noqa: BLE001 - a missing database driver must not cost the run its result
        return f"run not recorded in fleet history: {type(exc).__name__}: {exc}"
    return record(report, url, **options)


def outlier_findings(report: dict[str, Any], **options: Any) -> list[Any]:
    from preflight.history.outliers import outlier_findings as find

    return find(report, **options)


def outlier_result(report: dict[str, Any], **options: Any) -> Any:
    from preflight.history.outliers import outlier_result as result

    return result(report, **options)


def open_store(url: str | Path | None = None, *, create: bool = False, **options: Any) -> Any:
    from preflight.history.store import Store

    return Store(url, create=create, **options)


def context_for_report(store: Any, report: dict[str, Any], **options: Any) -> dict[str, Any]:
    from preflight.history.context import context_for_report as context

    return context(store, report, **options)


def report_context(report: dict[str, Any], url: str | Path | None = None,
                   **options: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Where this run's headline figures stand among the earlier runs in the store at `url`, for its
    report; never raises. Returns (context, None), or (None, the warning to show)."""
    try:
        from preflight.history.context import report_context as context
    except Exception as exc:  # noqa: BLE001 - a missing database driver must not cost the run its reports
        return None, f"fleet history left out of the report: {type(exc).__name__}: {exc}"
    return context(report, url, **options)


__all__ = ["context_for_report", "open_store", "outlier_findings", "outlier_result", "record_run", "report_context"]
