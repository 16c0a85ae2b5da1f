"""Text made safe for a terminal, once, where it enters the printer.

Much of what nev prints it did not write itself: lane folder names, ledger lines, change-log
entries, job names and reasons, other people's log lines, files on the share. A terminal obeys
the escape sequences in such text: OSC 52 writes the clipboard, OSC 0 the window title, CSI moves
the cursor and recolours, a backspace or carriage return overwrites what was printed. So every
control character is written visibly instead (`\\x1b`, `\\x07`, `\\x08`, ...), which neutralises
every escape sequence (CSI, OSC, DCS, APC, ...: each starts with ESC or a C1 control), and a lone
surrogate (an argument or file name that is not UTF-8) is written as the byte it stands for
(`\\xff`) instead of ending the command in a UnicodeEncodeError.

`install()` (nev's entry point) puts `SafeStream` in front of stdout and stderr, so every line
nev prints passes through `safe`; nev's own progress bar writes to the raw stream (`raw`). JSON
output is escaped by the encoder itself (`\\u001b`).

| in the text                         | printed as          |
|-------------------------------------|---------------------|
| newline, tab                        | itself              |
| other C0 controls, DEL (0x00-0x1f, 0x7f) | `\\x1b`, `\\x07`, ... |
| C1 controls (U+0080-U+009F)          | `\\x9b`, ...         |
| a lone surrogate U+DC80-U+DCFF       | `\\xff` (the byte)   |
| any other lone surrogate             | `\\ud800`           |
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    if 0xDC80 <= c <= 0xDCFF:
        return f"\\x{c - 0xDC00:02x}"
    if c > 0xFF:
        return f"\\u{c:04x}"
    return f"\\x{c:02x}"


def safe(text: str) -> str:
    """`text` with every control character and lone surrogate written visibly (newlines and tabs
    kept): nothing in it can drive a terminal."""
    return _UNSAFE.sub(_visible, text)


def safe_line(text: str) -> str:
    """`safe`, on one line: newlines and tabs written visibly too (a name, a field)."""
    return safe(text).replace("\n", "\\n").replace("\t", "\\t")


class SafeStream:
    """A text stream that writes `safe(s)` to the stream it stands in front of."""

    def __init__(self, raw: TextIO) -> None:
        self._raw = raw

    @property
    def raw_stream(self) -> TextIO:
        return self._raw

    def write(self, s: str) -> int:
        self._raw.write(safe(s))
        return len(s)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer, ...
        return getattr(self._raw, name)


def install() -> None:
    """Put `SafeStream` in front of sys.stdout and sys.stderr (once)."""
    if not isinstance(sys.stdout, SafeStream):
        sys.stdout = SafeStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, SafeStream):
        sys.stderr = SafeStream(sys.stderr)  # type: ignore[assignment]


def raw(stream: Any) -> Any:
    """The stream behind a `SafeStream` (for nev's own escapes: the progress bar), or `stream`."""
    return stream.raw_stream if isinstance(stream, SafeStream) else stream
