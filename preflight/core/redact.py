"""Secrets out of every text preflight shows or writes: the password of a URL and the value of a
token in its query string.

A URL is accepted in several places (the history store's, Prometheus's, the Kubernetes API
server's: in preflight.toml, in --set, in the environment) and every one may carry credentials,
`postgresql://user:PASSWORD@db/preflight` or `https://prom?token=SECRET`. Whatever preflight prints,
logs or records (the command line, the config text it judged with, an error message that quotes
the URL, even one that does not parse) passes through `redact_text` first, which masks them as
`***`. `redact_url` is the same for one URL.
"""

from __future__ import annotations

import re

MASK = "***"
# Query keys whose value is a secret (matched case-insensitively, also as a suffix: x-api-key, db_password).
SECRET_KEYS = r"(?:password|passwd|pwd|secret|token|access_token|auth|authorization|api[-_]?key|apikey|key|sig|signature|credential|credentials)"

# scheme://user:password@ : the password runs to the last @ before the host (a password may hold @).
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s:@]*:)(?P<secret>[^\s]*?)(?P<at>@)(?=[^@\s]*(?:[/?#\s]|$))")
# scheme://token@host (no colon): a bare user part that looks like a token is masked too.
_TOKEN_USER = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://)(?P<secret>[A-Za-z0-9_\-.~%]{20,})(?P<at>@)")
_QUERY = re.compile(r"(?P<head>[?&;](?:[A-Za-z0-9_.\-]*[_\-.])?" + SECRET_KEYS + r"=)(?P<secret>[^&#\s\"']*)", re.I)
# PGPASSWORD=..., --password ..., password = "..." in free text (a config file's text).
_ASSIGNED = re.compile(r"(?P<head>\b(?:[A-Za-z0-9_]*?(?:password|passwd|secret|token|api[-_]?key)|pwd|auth|"
                       r"authorization|credentials?)\b\s*[=:]\s*[\"']?)(?P<secret>[^\s\"',}&]+)", re.I)


def redact_text(text: object, assignments: bool = False) -> str:
    """`text` with every URL's password and every secret query value masked. `assignments` also masks
    `password = ...` / `token: ...` outside URLs (the text of a config file)."""
    value = "" if text is None else str(text)
    value = _USERINFO.sub(lambda m: m.group("head") + (MASK if m.group("secret") else "") + m.group("at"), value)
    value = _TOKEN_USER.sub(lambda m: m.group("head") + MASK + m.group("at"), value)
    value = _QUERY.sub(lambda m: m.group("head") + (MASK if m.group("secret") else ""), value)
    if assignments:
        value = _ASSIGNED.sub(lambda m: m.group("head") + MASK, value)
    return value


def redact_url(url: object) -> str:
    """One URL with its password and secret query values masked, whether or not it parses."""
    return redact_text(url)


def has_secret(text: object) -> bool:
    return redact_text(text, assignments=True) != ("" if text is None else str(text))
