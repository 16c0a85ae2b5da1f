"""Golden files (Oxidized-style) for the capture of each role type: recorded host output goes
through the real parser and the real masking, compared with an expected record and an
expected redacted form. `python -m tests.helpers.snapshot_golden_record --update` rewrites them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rig.rigfile import Role
from rig.snapshot.capture import parse_capture
from rig.snapshot.diff import redacted_view

GOLDEN = Path(__file__).resolve().parent / "golden" / "snapshot"
KINDS = ["proxy", "gateway", "units", "vm"]


def _role(kind: str) -> tuple[Role, dict]:
    spec = json.loads((GOLDEN / kind / "role.json").read_text())
    return Role(name=kind, hosts=spec["hosts"], files=spec["files"], commands=spec.get("commands", []),
                masks=spec.get("masks", []), volatile=spec.get("volatile", [])), spec


def expected(kind: str) -> tuple[str, str]:
    role, spec = _role(kind)
    raw = (GOLDEN / kind / "host-output.txt").read_bytes()
    state = parse_capture(raw, spec["hosts"][0], role.files, role.commands)
    return json.dumps(state.to_json(), indent=2) + "\n", redacted_view(role, state)


@pytest.mark.parametrize("kind", KINDS)
def test_capture_of_role_type_matches_golden_record(kind):
    rec, _ = expected(kind)
    assert rec == (GOLDEN / kind / "record.json").read_text()


@pytest.mark.parametrize("kind", KINDS)
def test_redacted_form_of_role_type_matches_golden_and_hides_secrets(kind):
    _, red = expected(kind)
    assert red == (GOLDEN / kind / "redacted.txt").read_text()
    role, spec = _role(kind)
    state = parse_capture((GOLDEN / kind / "host-output.txt").read_bytes(), "h", role.files, role.commands)
    held = b"".join(state.blobs.values())
    for secret in spec["secrets"]:
        assert secret not in red
        assert secret.encode() in held  # kept in the snapshot: a restore needs it


def test_gateway_golden_record_keeps_owner_mode_and_absent_file():
    rec = json.loads((GOLDEN / "gateway" / "record.json").read_text())
    files = {f["path"]: f for f in rec["files"]}
    assert files["/etc/litellm/keys.json"]["mode"] == "0600"
    assert files["/etc/litellm/config.yaml"]["mode"] == "0640"
    assert files["/etc/litellm/extra.env"] == {"path": "/etc/litellm/extra.env", "missing": True}
    assert rec["commands"][0]["exit"] == 0
