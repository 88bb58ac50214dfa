"""Secrets out of every text preflight shows or writes: the password of a URL and the value of a
token in its query string.

A URL is accepted in several places (the history store's, Prometheus's, the Kubernetes API
server's: in preflight.toml, in --set, in the environment) and every one may carry credentials,
`postgresql://user:PASSWORD@db/preflight` or `https://prom?token=SECRET`. Whatever preflight prints,
logs or records (the command line, the config text it judged with, an error message that quotes
the URL, even one that does not parse) passes through `redact_text` first, which masks them as
`***`: userinfo with a scheme, with `://` alone or with none (`alice:PW@db/h`, a hosts file's line),
a password holding quotes or @, and the value of any query key that names a token, key, session,
jwt, signature, password, secret or auth, in any case. The URL patterns look at one word (text
between white space) at a time, so the work is linear in the text whatever it holds. `redact_url` is the same for one URL; `scrub` masks every string of an object in place;
`RedactingStream` wraps the terminal.

A run report is scrubbed once, piece by piece, where each piece enters it, never as a whole again
before it is written (a pass over 10,000 results costs about a second): a result when it joins the
report (RunReport.add, before its line is appended to results.jsonl, so the stream and every report
format hold the same masked text; preflight.core.results_file for results read back from a file),
and the rest of the report (the command, the config record, load errors, baseline, history context)
by `scrub_report` at the write boundary, preflight.run.finish.reports, which leaves the results alone.
A result that reaches the report some other way would be written unmasked: add it with RunReport.add.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any

MASK = "***"
# Query keys whose value is a secret: any key holding one of these words, in any case (token, apitoken,
# access_token, X-Amz-Signature, sig, jwt, session, api_key, x-api-key, db_password, auth, ...).
SECRET_KEYS = r"(?:passw|pwd|secret|token|auth|key|sig|session|jwt|credential|cookie|private)"

# One "word" is what the URL patterns look at: text between white space and < >. Looking at one word
# at a time keeps the work linear whatever the text holds (a pattern tried from every `://` or `;`
# of one long line would scan to its end from each).
_WORD = re.compile(r"[^\s<>]+")
# An image's digest, `name:tag@sha256:...` or `registry:5000/team/train@sha256:...`: no password before it.
_DIGEST = r"[a-z0-9]+:[0-9a-fA-F]{32,}"
# [scheme]://user:password@ : the password runs to the last @ of the word (it may hold @ ? / # and
# quotes); what follows that @ holds none. The scheme may be missing (`://alice:pw@host`).
_USERINFO = re.compile(r"(?P<head>(?:[A-Za-z][A-Za-z0-9+.-]*)?://[^/?#:@\"'`]*:)(?P<secret>.*)(?P<at>@)"
                       r"(?!" + _DIGEST + r")(?=[^@\"'`]*(?:[\"'`]|\Z))", re.S)
# user:password@host with no scheme at all (a hosts file's line, a history URL written without one),
# from the start of the word or after a quote, bracket or `=`.
_BARE_USERINFO = re.compile(r"(?<![^\"'`(\[{=,;])(?P<head>[A-Za-z0-9._~%+!$-]+:)(?!//)(?P<secret>.*)(?P<at>@)"
                            r"(?!" + _DIGEST + r")(?=[A-Za-z0-9\[][^@\"'`]*(?:[\"'`]|\Z))", re.S)
# scheme://token@host (no colon): a bare user part that looks like a token is masked too.
_TOKEN_USER = re.compile(r"(?P<head>(?:[A-Za-z][A-Za-z0-9+.-]*)?://)(?P<secret>[A-Za-z0-9_\-.~%]{20,})(?P<at>@)")
_QUERY = re.compile(r"(?P<head>[?&;][A-Za-z0-9_.\-%]*?" + SECRET_KEYS + r"[A-Za-z0-9_.\-%]*=)(?P<secret>[^&#\"'`]*)",
                    re.I)
# PGPASSWORD=..., --password ..., password = "..." in free text (a config file's text).
_ASSIGNED = re.compile(r"(?P<head>\b(?:[A-Za-z0-9_]*?(?:password|passwd|secret|token|api[-_]?key)|pwd|auth|"
                       r"authorization|credentials?)\b\s*[=:]\s*[\"']?)(?P<secret>[^\s\"',}&]+)", re.I)


# What any of the patterns needs to find at all, for one quick scan of text that holds none of it.
_ANY_URL = re.compile(r"@|[?&;][^=\s?&;]*=", re.I)
_ANY_ASSIGNED = re.compile(r"@|[?&;][^=\s?&;]*=|passw|pwd|secret|token|auth|credential|api[-_]?key", re.I)


def _masked(found: re.Match[str]) -> str:
    return found.group("head") + (MASK if found.group("secret") else "") + (found.groupdict().get("at") or "")


def _word(found: re.Match[str]) -> str:
    word = found.group(0)
    if "@" in word:
        word = _USERINFO.sub(_masked, word)
        word = _TOKEN_USER.sub(_masked, word)
        word = _BARE_USERINFO.sub(_masked, word)
    if "=" in word:
        word = _QUERY.sub(_masked, word)
    return word


def redact_text(text: object, assignments: bool = False) -> str:
    """`text` with every URL's password and every secret query value masked. `assignments` also masks
    `password = ...` / `token: ...` outside URLs (the text of a config file)."""
    value = "" if text is None else str(text)
    if not (_ANY_ASSIGNED if assignments else _ANY_URL).search(value):
        return value  # nothing of the forms below: most text, for one scan
    value = _WORD.sub(_word, value)
    if assignments:
        value = _ASSIGNED.sub(_masked, value)
    return value


def redact_url(url: object) -> str:
    """One URL with its password and secret query values masked, whether or not it parses."""
    return redact_text(url)


NOTE = "passwords and tokens in URLs are masked (***) in what preflight records"


def scrub(obj: Any, assignments: bool = False, _depth: int = 0) -> Any:
    """`obj` with every string in it redacted: dicts, lists and dataclasses are changed in place (and
    returned), a string is returned redacted."""
    kind = type(obj)
    if kind is str:
        new = redact_text(obj, assignments)
        return obj if new == obj else new
    if kind in _PLAIN or _depth > 64 or isinstance(obj, enum.Enum):
        return obj  # a number, or a status or scope (a str subclass): never a secret
    if kind is dict:
        for key, value in obj.items():
            if type(value) in _PLAIN:
                continue
            new = scrub(value, assignments, _depth + 1)
            if new is not value:
                obj[key] = new
    elif kind is list:
        for i, value in enumerate(obj):
            if type(value) in _PLAIN:
                continue
            new = scrub(value, assignments, _depth + 1)
            if new is not value:
                obj[i] = new
    elif kind is tuple:
        return tuple(scrub(v, assignments, _depth + 1) for v in obj)
    elif isinstance(obj, str):
        return redact_text(obj, assignments)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = getattr(obj, "__dict__", None)
        names = list(fields) if fields is not None else [f.name for f in dataclasses.fields(obj)]
        for name in names:
            if name in _FIGURES:
                continue  # numbers and statuses: never a URL (a figure's name and unit are text, and scrubbed)
            value = getattr(obj, name)
            if type(value) in _PLAIN:
                continue
            new = scrub(value, assignments, _depth + 1)
            if new is not value:
                object.__setattr__(obj, name, new)
    return obj


def scrub_report(report: Any) -> Any:
    """Every field of a run report but its results (each was scrubbed as it joined the report; see
    the module docstring), in place."""
    for item in dataclasses.fields(report):
        if item.name == "results":
            continue
        value = getattr(report, item.name)
        if type(value) in _PLAIN:
            continue
        new = scrub(value, _depth=1)
        if new is not value:
            setattr(report, item.name, new)
    return report


_PLAIN = frozenset({int, float, bool, type(None), bytes})
_FIGURES = frozenset({"samples", "status", "scope", "duration_s", "exit_code", "value", "threshold", "at"})


class RedactingStream:
    """A text stream that redacts what is written to it, line by line (a line is held back until it
    ends, or until flush, so a URL split over two writes is still masked)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError("write() argument must be str")
        self._pending += text
        if "\n" in self._pending:
            done, _, self._pending = self._pending.rpartition("\n")
            self._stream.write(redact_text(done + "\n", assignments=True))
        if len(self._pending) > 65536 or "\r" in self._pending:
            self._emit()
        return len(text)

    def _emit(self) -> None:
        if self._pending:
            self._stream.write(redact_text(self._pending, assignments=True))
            self._pending = ""

    def flush(self) -> None:
        self._emit()
        self._stream.flush()

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":  # bytes written past the redaction would not be masked
            raise AttributeError(name)
        return getattr(self._stream, name)


def basic_auth(url: str) -> tuple[str, dict[str, str]]:
    """(the URL without `user:password@`, the HTTP headers that send them as basic authentication):
    credentials in a URL are credentials, never part of the host name to resolve."""
    import base64
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, {}
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()).decode()
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), {"Authorization": f"Basic {token}"}


def url_problem(url: str) -> str:
    """Why `url` (scheme://...) cannot be used: a port that is no number or out of range, a bracket
    never closed; "" for a usable one or a plain path. The message names the URL with its password
    masked."""
    import urllib.parse

    if "://" not in url:
        return ""
    try:
        port = urllib.parse.urlsplit(url).port
    except ValueError as exc:
        return f"not a usable URL ({exc}): {redact_url(url)}"
    if port == 0:
        return f"not a usable URL (port 0): {redact_url(url)}"
    return ""
