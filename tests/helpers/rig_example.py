"""The committed example rig file, loadable: a HOME holding the key files it names per host and role
(the rig file refuses a host's key that does not exist)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "rig" / "rig.example.json"


def host_keys(data: dict) -> list[str]:
    """Every `ssh_key` of a host, a role or a serving role (the top-level one is not checked)."""
    sections = [*data.get("hosts", {}).values(), *data.get("roles", {}).values(),
                *data.get("serving", {}).values()]
    return [s["ssh_key"] for s in sections if "ssh_key" in s]


def with_keys(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME is `home`, holding each key file the example names; returns the example's path."""
    monkeypatch.setenv("HOME", str(home))
    for key in host_keys(json.loads(EXAMPLE.read_text())):
        assert key.startswith("~/"), key
        p = home / key[2:]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("a private key file\n")
    return EXAMPLE
