"""Text from machines made inert before a person reads it: in the terminal and in Markdown.

A check's summary, a finding's sentence, an unreachable node's last line of stderr and a command's
output tail all come from programs preflight does not control. Written as they are, an escape
sequence clears the screen or rewrites a line (`\\x1b[2J`, `\\r`), a bidirectional override shows
text in another order than it is (U+202E), and a newline starts a line of its own that can read
"## preflight: GO" above the real verdict. Every reporter that writes for a terminal or for
Markdown passes machine text through `single_line` (a sentence, a table cell) or `block` (an
output tail), and nowhere else decides what is safe.

- ANSI escape sequences (CSI, OSC, DCS and the other ESC forms, 8-bit CSI) are removed: they are
  colour and cursor control, never content.
- Other control characters (C0 but tab and newline, DEL, C1), the bidirectional controls
  (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), lone surrogates and U+FFFE/U+FFFF are
  shown as `\\xNN` / `\\uNNNN`. The JUnit reporter passes every attribute and text through these
  too, so junit.xml is valid XML whatever a node, a plugin or a command is called.
- `single_line` also turns every line break (\\n, \\r, \\v, \\f, U+0085, U+2028, U+2029, the
  separators U+001C-U+001E) into a space; `block` keeps \\n and turns \\r\\n and a lone \\r into \\n.
"""

from __future__ import annotations

import re

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI: colours, cursor movement, clearing the screen
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"  # the other escapes, and a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # CSI in its 8-bit form
)
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def _shown(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _hidden(keep: str) -> re.Pattern[str]:
    """What is shown as an escape, but the characters in `keep`: the control characters, the
    bidirectional controls, and what no XML document may hold and no terminal shows (lone surrogates
    and U+FFFE, U+FFFF)."""
    controls = "".join(re.escape(chr(c)) for c in range(0x20) if chr(c) not in keep)
    return re.compile("[" + controls + "\x7f-\x9f" + _BIDI + "\ud800-\udfff\ufffe\uffff]")


_HIDDEN_IN_LINE, _HIDDEN_IN_BLOCK = _hidden("\t"), _hidden("\n\t")
# Text without any of these is already what single_line / block make of it (the common case): every
# escape sequence starts with a control character, and the line breaks are controls or U+2028/U+2029.
_LINE_WORK = re.compile(_hidden("").pattern[:-1] + "\u2028\u2029]")
_BLOCK_WORK = re.compile(_HIDDEN_IN_BLOCK.pattern[:-1] + "\u2028\u2029]")
_LINE_BREAKS = re.compile("[" + _BREAKS + "]+")
_OTHER_BREAKS = re.compile("[" + _BREAKS.replace("\n", "") + "]")


def _neutral(text: str, hidden: re.Pattern[str]) -> str:
    text = _ANSI.sub("", text)
    return hidden.sub(lambda m: _shown(m.group(0)), text)


def single_line(text: object) -> str:
    """One line with no control characters; spacing inside the line is kept as it was."""
    value = str(text if text is not None else "")
    if not _LINE_WORK.search(value):
        return value
    value = _LINE_BREAKS.sub(" ", _ANSI.sub("", value))
    return _neutral(value, _HIDDEN_IN_LINE).replace("\t", " ")


def block(text: object) -> str:
    """Lines of output with no control characters but the line breaks and tabs."""
    value = str(text if text is not None else "")
    if not _BLOCK_WORK.search(value):
        return value
    value = value.replace("\r\n", "\n")
    value = _OTHER_BREAKS.sub("\n", _ANSI.sub("", value))
    return _neutral(value, _HIDDEN_IN_BLOCK)
