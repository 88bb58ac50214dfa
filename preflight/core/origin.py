"""Where a configuration value came from, as a value: its kind (the check's default, the run level, a
profile, a config file, --set, a flag, the command, the check's own preparation) and what names it
(the profile, the file, the flag), and whether the run being re-judged recorded it.

A run records its origins as text (RunReport.judged_with["sources"]: "--profile h100-8x", "--set",
"the run (--config preflight.toml)"); `Origin.from_text` is the one reader of that text, and
`str(origin)` writes it exactly as it was read.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace


class OriginKind(str, enum.Enum):
    DEFAULT = "default"  # the check's own default
    LEVEL = "level"  # the run level's (name: the level)
    PROFILE = "profile"  # --profile (name: the profile)
    FILE = "file"  # --config (name: the file's path)
    SET = "set"  # --set
    FLAG = "flag"  # a flag of its own (name: "--fail-on", "--level", "--timeout")
    COMMAND = "command"  # the command's own setting (name: "healthcheck")
    PREPARED = "prepared"  # prepared by the check on the coordinator (its pins): no one chose it
    RUN = "run"  # recorded by the run, with nothing more said about it


PREPARED_TEXT = "prepared by the check on the coordinator"
_RUN_TEXT = "the run"
_PREFIXES = ((OriginKind.PROFILE, "--profile "), (OriginKind.FILE, "--config "), (OriginKind.LEVEL, "level "))
_FIXED = {OriginKind.DEFAULT: "default", OriginKind.SET: "--set", OriginKind.PREPARED: PREPARED_TEXT,
          OriginKind.RUN: _RUN_TEXT}


@dataclass(frozen=True)
class Origin:
    kind: OriginKind
    name: str = ""  # the profile, the file, the flag, the level, the command
    recorded: bool = False  # recorded by the run being re-judged (the bottom layer of `report --rejudge`)

    def __str__(self) -> str:
        inner = self._own_text()
        if not self.recorded or self.kind is OriginKind.RUN:
            return inner
        return f"{_RUN_TEXT} ({inner})"

    def _own_text(self) -> str:
        if self.kind in _FIXED:
            return _FIXED[self.kind]
        prefix = dict(_PREFIXES).get(self.kind, "")
        return f"{prefix}{self.name}"

    @property
    def shown(self) -> str:
        """As a report names it: `profile h100-8x`, `--set`, `--config preflight.toml` (the run's own
        or one given to --rejudge alike)."""
        if self.kind is OriginKind.PROFILE:
            return f"profile {self.name}"
        return self._own_text()

    def as_recorded(self) -> Origin:
        return replace(self, recorded=True)

    @classmethod
    def from_text(cls, text: str) -> Origin:
        """The origin a report recorded as `text`; a text of no known form is a flag of that name."""
        recorded = False
        if text.startswith(f"{_RUN_TEXT} (") and text.endswith(")"):
            text, recorded = text[len(_RUN_TEXT) + 2:-1], True
        for kind, fixed in _FIXED.items():
            if text == fixed:
                return cls(kind, recorded=recorded or kind is OriginKind.RUN)
        for kind, prefix in _PREFIXES:
            if text.startswith(prefix):
                return cls(kind, text[len(prefix):], recorded)
        return cls(OriginKind.FLAG if text.startswith("-") else OriginKind.COMMAND, text, recorded)


NOTE = "note"  # the key of a report's sources that says what an older report could not say, not an origin


def read_sources(sources: dict[str, str] | None) -> dict[str, Origin]:
    """The origins a report recorded (judged_with or rejudged "sources"), by key; the note left out."""
    return {key: Origin.from_text(text) for key, text in (sources or {}).items() if key != NOTE}


DEFAULT = Origin(OriginKind.DEFAULT)
SET = Origin(OriginKind.SET)
PREPARED = Origin(OriginKind.PREPARED)
RUN = Origin(OriginKind.RUN, recorded=True)


def profile(name: str) -> Origin:
    return Origin(OriginKind.PROFILE, name)


def config_file(path: object) -> Origin:
    return Origin(OriginKind.FILE, str(path))


def flag(name: str) -> Origin:
    return Origin(OriginKind.FLAG, name)


def command(name: str) -> Origin:
    return Origin(OriginKind.COMMAND, name)


def level(name: str) -> Origin:
    return Origin(OriginKind.LEVEL, name)
