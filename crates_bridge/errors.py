"""The bridge's one error type (this package imports none of the others; `bench` turns it into a NevError)."""

from __future__ import annotations


class BridgeError(Exception):
    """A known failure: `message` is one sentence naming what is wrong and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
