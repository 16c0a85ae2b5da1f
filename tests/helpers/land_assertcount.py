"""Counts the assertions that passed in the landing tests (a pytest plugin, not a test module).

    PYTHONPATH=. .venv/bin/pytest -q -o enable_assertion_pass_hook=true -p tests.helpers.land_assertcount tests/test_land*.py

prints `assertions passed: N` (and the count in scenarios of real repositories) at the end.
Asserts inside tests/helpers/landkit.py (the invariant) count too; only test_land* items are counted.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.helpers.landkit")

_by_file: Counter[str] = Counter()
_KIT = Path(__file__).with_name("landkit.py")


@cache
def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _ours(path: Path, lineno: int, orig: str) -> bool:
    lines = _lines(path)
    head = orig.strip().splitlines()[0][:30] if orig.strip() else ""
    return 0 < lineno <= len(lines) and "assert" in lines[lineno - 1] and head in lines[lineno - 1]


def pytest_assertion_pass(item: pytest.Item, lineno: int, orig: str, expl: str) -> None:
    # Only the landing tests' own asserts (and the invariant's), not those of libraries
    # that pytest also rewrites (hypothesis's internals, for one).
    if item.nodeid.startswith("tests/test_land") and (_ours(item.path, lineno, orig) or _ours(_KIT, lineno, orig)):
        _by_file[item.nodeid.split("::")[0]] += 1


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    for f, n in sorted(_by_file.items()):
        terminalreporter.write_line(f"assertions passed in {f}: {n}")
    terminalreporter.write_line(f"assertions passed: {sum(_by_file.values())}")
