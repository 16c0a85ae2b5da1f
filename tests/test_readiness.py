"""The inventory check before a job's first stage: exit 0 ready, 3 transient, 10 permanent."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import folknet
from bench.readiness import (
    Need,
    Needs,
    Reason,
    ReasonKind,
    Snapshot,
    check,
    exit_code,
    needs_from_manifest,
    read_snapshot,
    report,
)
from lanes.base.errors import ConfigError
from lanes.base.inventory_record import Snapshot as Inventory

ROOT = Path(__file__).resolve().parent.parent
NOW = dt.datetime(2026, 11, 30, 10, 0, 0, tzinfo=dt.UTC)

DECLARED = {
    "schema": 1,
    "providers": ["self-hosted"],
    "aliases": {
        "fast": {"pool": "gpu0", "max_inflight": 8, "provider": "self-hosted", "keys": ["batch", "writer"]},
        "slow": {"pool": "gpu1", "max_inflight": 2, "provider": "self-hosted", "keys": ["batch"]},
        "old": {"pool": "gpu0", "max_inflight": 8, "provider": "self-hosted", "retired": "2026-09-22",
                "keys": ["batch"]},
        "elsewhere": {"pool": "gpu1", "max_inflight": 2, "provider": "cloud", "keys": ["batch"]},
    },
}


def iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def snap_data(statuses: dict[str, str], probed: dt.datetime = NOW) -> dict:
    return {"schema": 1, "probed_at": iso(probed), "written_at": iso(probed),
            "aliases": {a: {"status": s, "since": iso(probed - dt.timedelta(minutes=7)),
                            "last_error": None if s == "ready" else "HTTP 503: pool told to answer 503"}
                        for a, s in statuses.items()}}


@pytest.fixture()
def declared(tmp_path: Path) -> folknet.Folknet:
    p = tmp_path / "folknet.json"
    p.write_text(json.dumps(DECLARED))
    return folknet.load(p)


def run_check(needs: list[Need], data: dict | None, declared: folknet.Folknet, key: str | None = "batch"):
    typed = None if data is None else Inventory.from_json(data, "snap.json")
    snap = Snapshot("snap.json", typed, None if data is not None else "missing")
    return check(Needs(needs, key), snap, declared, NOW)


def test_every_model_ready_exits_0(declared):
    reasons = run_check([Need("fast"), Need("slow")], snap_data({"fast": "ready", "slow": "ready"}), declared)
    assert reasons == [] and exit_code(reasons) == 0
    assert report(reasons) == {"outcome": "ready", "exit": 0, "reasons": []}


def test_one_alias_failing_exits_3_with_its_reason(declared):
    reasons = run_check([Need("fast"), Need("slow")], snap_data({"fast": "ready", "slow": "failing"}), declared)
    assert exit_code(reasons) == 3
    assert [r.kind for r in reasons] == ["not-ready"]
    assert reasons[0].alias == "slow"
    assert "slow is failing for 7 min" in reasons[0].message and "503" in reasons[0].message


def test_stale_snapshot_exits_3(declared):
    old = NOW - dt.timedelta(minutes=16)
    reasons = run_check([Need("fast")], snap_data({"fast": "ready"}, probed=old), declared)
    assert exit_code(reasons) == 3
    assert [r.kind for r in reasons] == ["snapshot-stale"]
    assert "16 min old" in reasons[0].message and "15 min" in reasons[0].message


def test_snapshot_fourteen_minutes_old_is_still_fresh(declared):
    recent = NOW - dt.timedelta(minutes=14)
    assert run_check([Need("fast")], snap_data({"fast": "ready"}, probed=recent), declared) == []


def test_missing_snapshot_exits_3(declared, tmp_path):
    snap = read_snapshot(tmp_path / "nope.json")
    reasons = check(Needs([Need("fast")]), snap, declared, NOW)
    assert exit_code(reasons) == 3
    assert reasons[0].kind == "snapshot-missing" and "missing" in reasons[0].message


def test_corrupt_snapshot_is_transient_not_a_crash(declared, tmp_path):
    p = tmp_path / "snap.json"
    p.write_text('{"half": ')
    reasons = check(Needs([Need("fast")]), read_snapshot(p), declared, NOW)
    assert exit_code(reasons) == 3 and "not valid JSON" in reasons[0].message


def test_alias_never_probed_is_transient(declared):
    reasons = run_check([Need("slow")], snap_data({"fast": "ready"}), declared)
    assert exit_code(reasons) == 3 and reasons[0].kind == "not-probed"


def test_retired_alias_exits_10(declared):
    reasons = run_check([Need("old")], snap_data({"old": "retired"}), declared)
    assert exit_code(reasons) == 10
    assert reasons[0].kind == "alias-retired" and "2026-09-22" in reasons[0].message


def test_undeclared_alias_exits_10(declared):
    reasons = run_check([Need("mystery")], snap_data({"fast": "ready"}), declared)
    assert exit_code(reasons) == 10
    assert reasons[0].kind == "alias-undeclared" and "mystery" in reasons[0].message


def test_provider_not_declared_exits_10(declared):
    reasons = run_check([Need("elsewhere")], snap_data({"elsewhere": "ready"}), declared)
    assert [r.kind for r in reasons] == ["provider-undeclared"] and exit_code(reasons) == 10
    reasons = run_check([Need("", provider="cloud2")], snap_data({}), declared)
    assert [r.kind for r in reasons] == ["provider-undeclared"]


def test_provider_the_stage_does_not_allow_exits_10(declared):
    reasons = run_check([Need("fast", provider="cloud")], snap_data({"fast": "ready"}), declared)
    assert {r.kind for r in reasons} == {"provider-undeclared", "provider-not-allowed"}
    assert exit_code(reasons) == 10


def test_alias_not_allowed_for_the_key_exits_10(declared):
    reasons = run_check([Need("slow")], snap_data({"slow": "ready"}), declared, key="writer")
    assert [r.kind for r in reasons] == ["key-not-allowed"] and exit_code(reasons) == 10
    assert "writer" in reasons[0].message


def test_multiple_reasons_all_reported_and_permanent_wins(declared):
    stale = NOW - dt.timedelta(hours=2)
    reasons = run_check([Need("fast"), Need("slow"), Need("old"), Need("mystery")],
                        snap_data({"fast": "ready", "slow": "failing"}, probed=stale), declared)
    kinds = sorted(r.kind for r in reasons)
    assert kinds == ["alias-retired", "alias-undeclared", "not-ready", "snapshot-stale"]
    assert exit_code(reasons) == 10
    rep = report(reasons)
    assert rep["outcome"] == "refused" and len(rep["reasons"]) == 4
    assert {r["permanent"] for r in rep["reasons"]} == {True, False}


@pytest.mark.parametrize("kind, refused", [
    ("snapshot-missing", False), ("snapshot-unprobed", False), ("snapshot-stale", False), ("not-probed", False),
    ("not-ready", False), ("provider-undeclared", True), ("alias-undeclared", True), ("alias-retired", True),
    ("provider-not-allowed", True), ("key-not-allowed", True),
])
def test_a_reasons_kind_decides_whether_it_ever_clears(kind, refused):
    reason = Reason(ReasonKind(kind), "m", Need("fast", None, "gen"))
    assert reason.permanent is refused and exit_code([reason]) == (10 if refused else 3)
    assert reason.to_json() == {"kind": kind, "permanent": refused, "message": "m", "alias": "fast", "stage": "gen"}


def test_manifest_needs_from_stages_and_top_level():
    needs = needs_from_manifest({
        "name": "j", "key": "batch", "models": ["fast"],
        "stages": [{"name": "gen", "kind": "batch", "models": ["slow", {"alias": "fast", "provider": "self-hosted"}]},
                   {"name": "verify", "kind": "verify"}]}, "m.yaml")
    assert needs.key == "batch"
    assert needs.models == [Need("fast"), Need("slow", None, "gen"), Need("fast", "self-hosted", "gen")]


def test_manifest_with_bad_models_field_names_the_field():
    with pytest.raises(ConfigError) as e:
        needs_from_manifest({"stages": [{"models": [3]}]}, "m.yaml")
    assert "stages[0].models[0]" in str(e.value) and "m.yaml" in str(e.value)


def _cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "rig.cli", "job", "check", "inventory", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_cli_prints_every_reason_and_exits_with_the_code(tmp_path):
    decl = tmp_path / "folknet.json"
    decl.write_text(json.dumps(DECLARED))
    manifest = tmp_path / "job.yaml"
    manifest.write_text("name: j\nkey: batch\nstages:\n  - name: gen\n    models: [fast, slow]\n")
    snap = tmp_path / "inventory.json"
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    snap.write_text(json.dumps(snap_data({"fast": "ready", "slow": "failing"}, probed=now)))
    r = _cli([str(manifest), str(snap), "--declared", str(decl)], tmp_path)
    assert r.returncode == 3, r.stderr
    assert "not ready: model slow (stage gen) is failing" in r.stderr

    snap.write_text(json.dumps(snap_data({"fast": "ready", "slow": "ready"}, probed=now)))
    r = _cli([str(manifest), str(snap), "--declared", str(decl), "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"outcome": "ready", "exit": 0, "reasons": []}

    manifest.write_text("name: j\nstages:\n  - name: gen\n    models: [old, mystery, slow]\n")
    snap.write_text(json.dumps(snap_data({"slow": "failing"}, probed=now - dt.timedelta(minutes=30))))
    r = _cli([str(manifest), str(snap), "--declared", str(decl), "--json"], tmp_path)
    assert r.returncode == 10, r.stderr
    out = json.loads(r.stdout)
    assert sorted(x["kind"] for x in out["reasons"]) == ["alias-retired", "alias-undeclared", "not-ready",
                                                         "snapshot-stale"]
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("inventory: ")]) == 4


def test_cli_missing_manifest_is_one_clear_line(tmp_path):
    decl = tmp_path / "folknet.json"
    decl.write_text(json.dumps(DECLARED))
    r = _cli([str(tmp_path / "none.yaml"), str(tmp_path / "snap.json"), "--declared", str(decl)], tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"nev: {tmp_path / 'none.yaml'}: manifest not found; "
                                             "give the job's manifest file"]


def test_declared_health_must_be_a_url(tmp_path):
    p = tmp_path / "folknet.json"
    p.write_text(json.dumps({"providers": ["x"], "aliases": {
        "a": {"pool": "p", "max_inflight": 2, "provider": "x", "health": "/health"}}}))
    with pytest.raises(ConfigError) as e:
        folknet.load(p)
    assert "aliases.a.health" in str(e.value) and "URL" in str(e.value)


def test_committed_folknet_declares_a_retired_alias_and_names_no_host():
    fk = folknet.load(ROOT / "bench" / "folknet.json")
    assert any(a.is_retired() for a in fk.aliases.values())
    text = (ROOT / "bench" / "folknet.json").read_text()
    assert "198.18." not in text and "@" not in text and "http" not in text


def test_a_snapshot_with_a_bad_field_is_a_transient_reason_naming_the_field(tmp_path, declared):
    """The check reads the snapshot as the typed record every reader shares: a field of the wrong
    type is named (file and field) in one transient reason, as a missing snapshot is."""
    p = tmp_path / "inventory.json"
    data = snap_data({"fast": "ready"})
    data["aliases"]["fast"]["fails"] = "2"
    p.write_text(json.dumps(data))
    snap = read_snapshot(p)
    assert snap.data is None and "aliases.fast.fails" in (snap.problem or "")
    reasons = check(Needs([Need("fast")], "batch"), snap, declared, NOW)
    assert [r.kind for r in reasons] == [ReasonKind.SNAPSHOT_MISSING] and exit_code(reasons) == 3
    assert "\n" not in reasons[0].message and str(p) in reasons[0].message
