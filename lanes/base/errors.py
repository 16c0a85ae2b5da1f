"""The one error type the CLI turns into a single line and an exit code."""

from __future__ import annotations

from lanes.base.exitcodes import Exit


class NevError(Exception):
    """A known failure: `message` is one sentence naming what is wrong and what to do."""

    exit_code: int = Exit.FAILED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class UsageError(NevError):
    exit_code = Exit.USAGE


class ConfigError(NevError):
    """A settings file or variable is malformed: names the file, the field and the problem."""

    exit_code = Exit.FAILED


class NoLaneError(NevError):
    """No build lane answered; nothing ran."""

    exit_code = Exit.UNAVAILABLE


class DiskShortError(NevError):
    exit_code = Exit.DISK_SHORT
