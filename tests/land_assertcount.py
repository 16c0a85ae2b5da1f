"""Counts the assertions that passed (a pytest plugin, not a test module).

    PYTHONPATH=. .venv/bin/pytest -q -o enable_assertion_pass_hook=true -p tests.land_assertcount tests/test_land*.py

prints `assertions passed: N` at the end. Asserts inside tests/landkit.py count too.
"""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("tests.landkit")

_count = 0


def pytest_assertion_pass(item: pytest.Item, lineno: int, orig: str, expl: str) -> None:
    global _count
    _count += 1


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    terminalreporter.write_line(f"assertions passed: {_count}")
