"""Prometheus rule files on disk, read before Prometheus loads them. Pure but for reading the files.

A rule file is what `rule_files:` in prometheus.yml names (`groups: [{name, interval, rules: [{alert |
record, expr, for, labels, annotations}]}]`); prometheus-operator takes the same groups under
`spec.groups` of a PrometheusRule, and a manifest may hold several YAML documents or a `kind: List`.
Only alerting rules are kept (a recording rule alarms nobody), in the shape `rules_from_answer` gives
for the rules a running Prometheus reports, so the same judging applies: health is None (never
evaluated), `file` says where the rule was written.
"""

from __future__ import annotations

from typing import Any

from preflight.core.bounded import InputError, load_yaml_all, read_text

MAX_RULE_FILE_BYTES = 16 * 1024 * 1024  # a rule file of thousands of alerts is under 1 MiB

from preflight_checks.monitoring.promql import watched_expression


class RuleFileError(ValueError):
    """The file cannot be read as Prometheus rules; the message names the file and what is wrong."""


def _groups(doc: Any) -> list[Any] | None:
    if not isinstance(doc, dict):
        return None
    if doc.get("kind") == "List":
        found = [g for item in doc.get("items") or [] for g in (_groups(item) or [])]
        return found
    if isinstance(doc.get("groups"), list):
        return doc["groups"]
    spec = doc.get("spec")
    if doc.get("kind") == "PrometheusRule" and isinstance(spec, dict) and isinstance(spec.get("groups"), list):
        return spec["groups"]
    return None


def rules_from_text(text: str, where: str) -> list[dict[str, Any]]:
    """The alerting rules of one rule file or PrometheusRule manifest; RuleFileError naming `where`."""
    try:  # libyaml, no aliases (a "billion laughs" file), nesting bounded: preflight.core.bounded
        docs = [d for d in load_yaml_all(text, where) if d is not None]
    except InputError as exc:
        raise RuleFileError(str(exc)) from None
    groups = [g for doc in docs for g in (_groups(doc) or [])]
    if not any(_groups(doc) is not None for doc in docs):
        raise RuleFileError(f"{where}: no rule groups (neither `groups:` nor a PrometheusRule's `spec.groups`)")
    rules = []
    for group in groups:
        if not isinstance(group, dict):
            raise RuleFileError(f"{where}: a group that is not a mapping: {group!r:.80}")
        for rule in group.get("rules") or []:
            if not isinstance(rule, dict) or "alert" not in rule:
                continue
            query = str(rule.get("expr") or "").strip()
            rules.append({"name": str(rule["alert"]), "query": query, "group": group.get("name"), "health": None,
                          "last_error": "", "last_evaluation": None, "last_evaluation_ts": None,
                          "interval_s": None, "watches": watched_expression(query), "file": where,
                          "for": rule.get("for")})
    return rules


def read_rule_files(paths: list[str]) -> list[dict[str, Any]]:
    """The alerting rules of every file, in order; RuleFileError for a file that is missing or unreadable."""
    rules: list[dict[str, Any]] = []
    for path in paths:
        try:
            text = read_text(path, MAX_RULE_FILE_BYTES)
        except InputError as exc:
            raise RuleFileError(str(exc)) from None
        rules += rules_from_text(text, path)
    return rules
