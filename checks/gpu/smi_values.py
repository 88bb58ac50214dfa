"""Values as nvidia-smi writes them in its reports (`nvidia-smi -q`, `-q -x`): "81 C", "N/A",
"Enabled". Read the same way for the text report (nvidia_smi) and the XML one (nvidia_smi_xml). Pure."""

from __future__ import annotations

import re
from typing import Any


def number(text: Any) -> float | None:
    """The number a value starts with ("81 C" -> 81.0); None for "N/A" or anything else."""
    if not isinstance(text, str):
        return None
    found = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text)
    return float(found.group(1)) if found else None


def whole(text: Any) -> int | None:
    value = number(text)
    return int(value) if value is not None else None


def yes(text: Any) -> bool | None:
    """True for Yes, Enabled or Active; None when the report gives no answer."""
    if not isinstance(text, str) or text in ("N/A", "[N/A]", "Unknown Error"):
        return None
    return text.strip().lower() in ("yes", "enabled", "active")


def version_value(text: Any) -> str | None:
    """A version as nvidia-smi prints it, without the note driver 610 appends to the names it
    deprecated ("610.47 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]");
    None for "N/A", "Not Found" or nothing."""
    if not isinstance(text, str):
        return None
    value = text.split("[", 1)[0].strip()
    return value if value and value not in ("N/A", "Not Found") else None
