"""Hostile and careless input to nev's state and declaration files (issue 31): each is refused
with one line naming the file (and the field), never a traceback, and the file is left as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.state import JobState

ROOT = Path(__file__).resolve().parent.parent


def nev(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, cwd=cwd or ROOT, timeout=120)


def one_line(r: subprocess.CompletedProcess, *names: str) -> None:
    assert r.returncode in (1, 2), (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nev: "), r.stderr
    for n in names:
        assert n in lines[0], (n, lines[0])


# --- job events (item 10): an event nev never records is refused, naming it ------------------------

def _job_state(tmp_path: Path) -> Path:
    js = JobState.open(tmp_path / "st")
    js.record("run-started", job="j", run_id="r1", stages=["a"], inputs={})
    js.record("stage-started", stage="a", inputs={"head": "x"})
    js.close()
    return tmp_path / "st"


def test_a_hand_edited_unknown_event_is_refused_naming_it_and_the_close_one(tmp_path):
    st = _job_state(tmp_path)
    ev = st / "events.jsonl"
    lines = ev.read_text().splitlines()
    last = json.loads(lines[-1])
    last["event"] = "stage-passEd"
    ev.write_text("\n".join([*lines[:-1], json.dumps(last, sort_keys=True)]) + "\n")
    before = ev.read_bytes()
    r = nev("job", "status", "--state", str(st))
    one_line(r, str(ev), "line 2", "stage-passEd", "stage-passed")
    assert ev.read_bytes() == before


@pytest.mark.parametrize("field,value", [("stage", 5), ("inputs", None), ("inputs", [1]), ("stages", "a")])
def test_an_event_field_of_the_wrong_type_is_refused_naming_it(tmp_path, field, value):
    st = _job_state(tmp_path)
    ev = st / "events.jsonl"
    lines = ev.read_text().splitlines()
    first = json.loads(lines[0])
    first[field] = value
    if field == "stage":
        first = {**json.loads(lines[1]), "stage": value}
        lines = [lines[0], json.dumps(first, sort_keys=True)]
    else:
        lines = [json.dumps(first, sort_keys=True)]
    ev.write_text("\n".join(lines) + "\n")
    r = nev("job", "status", "--state", str(st))
    if value is None:   # null is a field left out
        assert "Traceback" not in r.stderr
    else:
        one_line(r, str(ev), field)


# --- tracks.json (item 10): unknown keys are refused naming the key and the close one ----------------

@pytest.mark.parametrize("data,key,near", [
    ({"verify": "true", "landCheck": ["false"]}, "landCheck", "landChecks"),
    ({"verify": "true", "specWatch": {"landscript": "x"}}, "specWatch.landscript", "landScript"),
    ({"verify": "true", "specWatch": {"lanes": {"tol": "x"}}}, "specWatch.lanes.tol", "tool"),
    ({"verify": "true", "install": {"command": "x", "target": "t", "targt": "u"}}, "install.targt", "target"),
])
def test_an_unknown_key_in_tracks_json_is_refused_naming_it_and_the_close_one(tmp_path, data, key, near):
    from jobs import tracks
    from lanes.base.errors import ConfigError

    p = tmp_path / "tracks.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as e:
        tracks.load(p)
    assert str(p) in str(e.value) and f"field {key} " in str(e.value) and near in str(e.value)


def test_nev_settings_names_an_unknown_tracks_key(tmp_path):
    (tmp_path / "tracks.json").write_text(json.dumps({"verify": "true", "landCheck": ["false"]}))
    r = nev("settings", "--json", cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    row = [f for f in json.loads(r.stdout)["files"] if f["what"] == "tracks"][0]
    assert "landCheck" in row["error"] and "landChecks" in row["error"]


def test_main_tracks_json_that_is_not_utf8_is_one_line(tmp_path):
    from jobs import tracks
    from lanes.base.errors import ConfigError
    from lanes.base.gitrun import Repo

    repo = Repo(tmp_path)
    repo.git("init", "-q", "-b", "main")
    (tmp_path / "tracks.json").write_bytes(b'{"verify": "\xff"}')
    repo.git("add", "tracks.json")
    repo.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t")
    with pytest.raises(ConfigError, match=r"^main:tracks.json: the tracks file is not UTF-8"):
        tracks.at(repo, "main")


@pytest.mark.parametrize("loader,data,key,near", [
    ("folknet", {"providers": ["x"], "aliases": {"a": {"pool": "p", "max_inflight": 1, "provider": "x",
                                                         "max_inflght": 9}}}, "aliases.a.max_inflght", "max_inflight"),
    ("folknet", {"providers": ["x"], "aliases": {}, "provders": []}, "provders", "providers"),
    ("rigfile", {"roles": {}, "jmup": "j@h"}, "jmup", "jump"),
    ("rigfile", {"roles": {"r": {"hosts": ["root@h"], "reloads": "x"}}}, "roles.r.reloads", "reload"),
])
def test_an_unknown_key_in_a_declaration_is_refused_naming_it(tmp_path, loader, data, key, near):
    from bench import folknet
    from lanes.base.errors import ConfigError
    from rig import rigfile

    p = tmp_path / "f.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as e:
        {"folknet": folknet.load, "rigfile": rigfile.load}[loader](p)
    assert str(p) in str(e.value) and f"field {key} " in str(e.value) and near in str(e.value)


# --- snapshots (items 9, 10): one label, one winner; a damaged label is named ----------------------

def _rig_env(tmp_path: Path) -> dict[str, str]:
    rig = tmp_path / "rig.local.json"
    rig.write_text(json.dumps({"roles": {}}))
    return {"NEV_RIG_FILE": str(rig), "NEV_RIG_NOTES": str(tmp_path / "notes"),
            "NEV_LANES_FILE": str(tmp_path / "no-lanes.json")}


def test_two_snapshots_of_one_label_at_once_one_wins_the_other_is_refused(tmp_path, monkeypatch):
    import threading

    from lanes.base.errors import NevError
    from rig.snapshot import changelog, record
    from rig.snapshot.context import Context

    for k, v in _rig_env(tmp_path).items():
        monkeypatch.setenv(k, v)
    # the race of one label, with no host to reach: the guard against a rig file with no roles
    # (tests/test_small_traps.py) stood aside
    monkeypatch.setattr(record, "_something_to_take", lambda ctx: None)
    real_now = changelog.now
    monkeypatch.setattr(changelog, "now", lambda: (__import__("time").sleep(0.5), real_now())[1])
    outcomes: list[str] = []

    def one() -> None:
        try:
            record.take(Context.load(), "same", (), lambda s: None)
            outcomes.append("ok")
        except NevError as e:
            outcomes.append(e.message)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes)[-1] == "ok" and outcomes.count("ok") == 1, outcomes
    refusal = [o for o in outcomes if o != "ok"][0]
    assert "a snapshot labelled same exists" in refusal and "never overwritten" in refusal
    notes = tmp_path / "notes"
    assert [p.name for p in (notes / "snapshots" / "labels").iterdir()] == ["same.json"]
    log = [p for p in notes.rglob("*") if p.is_file() and "change" in p.name]
    assert log and log[0].read_text().count("same") == 1


def test_a_label_is_created_exclusively(tmp_path):
    from rig.snapshot.store import LocalStore, Manifest, StoreError

    st = LocalStore.open(tmp_path / "notes", [])
    st.write_manifest(Manifest("x", "t", "w"), new=True)
    with pytest.raises(StoreError, match="labelled x was just written by another"):
        st.write_manifest(Manifest("x", "t2", "w2"), new=True)
    assert st.read_manifest("x").time == "t"
    assert sorted(p.name for p in st.labels.iterdir()) == ["x.json"]


@pytest.mark.parametrize("content", [b"\xff\xfe", b"[" * 5000 + b"]" * 5000, b'{"format": 1}',
                                     b'{"format": 1, "label": "bad", "time": "t", "who": "w", "roles": []}',
                                     json.dumps({"format": 1, "label": "bad", "time": "t", "who": "w", "roles": {
                                         "r": {"h": {"files": [{"path": "/x", "uid": 0, "gid": 0, "user": "r",
                                                                "group": "r", "mode": "644", "size": 1,
                                                                "sha256": "../../etc/passwd"}],
                                                     "commands": []}}}}).encode()])
def test_nev_rig_snapshots_names_a_damaged_label_and_exits_1(tmp_path, content):
    from rig.snapshot.store import LocalStore, Manifest

    env = _rig_env(tmp_path)
    st = LocalStore.open(Path(env["NEV_RIG_NOTES"]), [])
    st.write_manifest(Manifest("good", "2026-01-01T00:00:00Z", "w"), new=True)
    bad = st.labels / "bad.json"
    bad.write_bytes(content)
    r = nev("rig", "snapshots", env=env)
    assert r.returncode == 1 and "good" in r.stdout
    one_line(r, str(bad), "damaged" if content.startswith(b'{"format') else "")
    assert bad.read_bytes() == content
    r = nev("rig", "diff", "bad", env=env)
    one_line(r, str(bad))


# --- forwards (item 8): `down` finds its supervisor whatever the state file says --------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("damage", ["bytes", "nesting", "wrong type", "gone", "gone with its lock"])
def test_forward_down_stops_the_supervisor_whose_state_file_is_broken_or_gone(tmp_path, damage):
    import socket

    from lanes.base import procs
    from rig.forward import state as st

    silent = socket.socket()      # a jump host that accepts and never speaks: the client waits
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    rig = tmp_path / "rig.local.json"
    rig.write_text(json.dumps({"jump": f"root@127.0.0.1:{silent.getsockname()[1]}", "forwards": {
        "fw": {"local_port": _free_port(), "target": "127.0.0.1:9", "check": "tcp"}}}))
    env = {"NEV_RIG_FILE": str(rig), "NEV_STATE_DIR": str(tmp_path / "state"),
           "NEV_KNOWN_HOSTS": str(tmp_path / "known_hosts"), "NEV_LANES_FILE": str(tmp_path / "none.json")}
    (tmp_path / "known_hosts").write_text("")
    sup = subprocess.Popen([sys.executable, "-m", "rig.cli", "rig", "forward", "supervise", "fw"],
                           env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd="/", start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            paths = st.Paths.of("fw")
        finally:
            for k, v in old.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        import time
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (paths.state.exists() and paths.lock.exists()
                                                   and '"ssh": {' in paths.state.read_text()):
            time.sleep(0.05)
        assert paths.state.exists(), "the supervisor did not start"
        client = json.loads(paths.state.read_text())["ssh"]["pid"]
        rec = procs.ProcRec(key="s", host="local", pid=sup.pid, start=procs.start_time(sup.pid) or 0, argv=[])
        {"bytes": lambda: paths.state.write_bytes(b"\xff\xfe{"),
         "nesting": lambda: paths.state.write_text("[" * 10000 + "]" * 10000),
         "wrong type": lambda: paths.state.write_text(json.dumps({"supervisor": [1], "name": 5})),
         "gone": lambda: paths.state.unlink(),
         "gone with its lock": lambda: (paths.state.unlink(), paths.lock.unlink())}[damage]()
        r = nev("rig", "forward", "down", "fw", env=env)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r
        assert f"fw: stopped (supervisor {sup.pid}" in r.stdout, r.stdout
        assert sup.wait(timeout=10) is not None and not procs.alive(rec)
        assert procs.start_time(client) is None, "its ssh client is left running"
        assert not paths.state.exists() and not paths.lock.exists()
    finally:
        silent.close()
        if sup.poll() is None:
            sup.kill()
            sup.wait()


# --- job names, records and submissions (item 10) --------------------------------------------------

MANIFEST = {"name": "demo", "base": "a" * 40, "spec": "specs/x.md",
            "stages": [{"name": "a", "kind": "command", "command": "true"}]}


@pytest.mark.parametrize("name,why", [("a..b", "'..'"), ("x.lock", ".lock"), ("x.", "ends with '.'")])
def test_a_job_name_that_is_no_git_ref_is_refused_at_validation(name, why):
    from jobs import manifest
    from lanes.base.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        manifest.parse({**MANIFEST, "name": name}, "job.yaml")
    assert "job.yaml: field name" in str(e.value) and why in str(e.value) and "job/NAME" in str(e.value)


def _records(tmp_path: Path, jobs: dict) -> Path:
    p = tmp_path / "state" / "job-results.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"schema": 1, "jobs": jobs}))
    return p


@pytest.mark.parametrize("key,rec,field", [
    ("../../etc", {"job": "../../etc"}, "jobs.../../etc"),
    ("a..b", {"job": "a..b"}, "jobs.a..b"),
    ("j", {"job": "j", "sends": -5}, "jobs.j.sends"),
    ("j", {"job": "j", "resends": -1}, "jobs.j.resends"),
    ("j", {"job": "j", "submitted_at": "yesterday"}, "jobs.j.submitted_at"),
    ("j", {"job": "j", "polled_at": "soon"}, "jobs.j.polled_at"),
    ("j", {"job": "j", "params": None}, "jobs.j.params"),
    ("j", {"job": "j", "lane": -2}, "jobs.j.lane"),
])
def test_a_bad_job_record_is_refused_at_load_naming_the_field(tmp_path, key, rec, field):
    p = _records(tmp_path, {key: rec})
    before = p.read_bytes()
    r = nev("job", "status", env={"NEV_STATE_DIR": str(tmp_path / "state")})
    one_line(r, str(p), f"field {field}")
    assert p.read_bytes() == before


def test_good_job_records_still_read(tmp_path):
    _records(tmp_path, {"j": {"job": "j", "sends": 1, "submitted_at": "2026-01-01T00:00:00+00:00",
                              "polled_at": "2026-01-01T00:00:00Z", "params": {"A": "b"}}})
    r = nev("job", "status", env={"NEV_STATE_DIR": str(tmp_path / "state")})
    assert r.returncode == 0 and "j: submitted" in r.stdout, r


def test_a_second_submission_of_one_name_while_one_runs_is_refused_before_anything_is_pushed(tmp_path):
    import yaml

    from jobs import records, submit
    from lanes.base.errors import NevError

    m = tmp_path / "job.yaml"
    m.write_text(yaml.safe_dump(MANIFEST))
    env = {**os.environ, "NEV_STATE_DIR": str(tmp_path / "state")}
    with records.submitting("demo", env):
        with pytest.raises(NevError, match=r"job demo: another `nev job submit` of it is running"):
            submit.submit(m, repo_path=tmp_path / "no-repo-here", environ=env)
    with records.submitting("demo", env):     # released: the next submission takes it
        pass


# --- item 11: the setting drift needs is named, and `nev box env` sets it ------------------------------

def test_drift_without_the_admin_key_names_the_setting_it_needs(tmp_path):
    key = tmp_path / "batch.key"
    key.write_text("sk-batch-key-000111")
    key.chmod(0o600)
    rig = tmp_path / "rig.local.json"
    rig.write_text(json.dumps({"roles": {}}))
    env = {"NEV_MODEL_KEY_FILE": str(key), "NEV_MODEL_URL": "http://127.0.0.1:9", "NEV_RIG_FILE": str(rig),
           "NEV_GATEWAY_ADMIN_KEY_FILE": "", "GENERA_GATEWAY_ADMIN_KEY_FILE": ""}
    r = nev("rig", "drift", env=env)
    one_line(r, "NEV_GATEWAY_ADMIN_KEY_FILE", "drift")
    assert "set NEV_MODEL_KEY_FILE" not in r.stderr


def test_box_env_points_at_every_key_and_declaration_file_the_box_holds(tmp_path):
    from rig.box import plan
    from rig.box.core import Box

    b = Box("tb", "198.18.9", tmp_path / "tb", "netns")
    info = b._info(plan.Layout("tb", "198.18.9", 2))
    env = b.env_for(info)
    assert env["NEV_GATEWAY_ADMIN_KEY_FILE"] == str(info.master_key_file)
    held = {"batch key": info.keys.get("batch"), "admin key": info.master_key_file, "folknet": info.folknet_file,
            "rig file": info.rig_file, "lanes file": info.lanes_file, "known_hosts": info.known_hosts,
            "ssh key": info.ssh_key, "forge token": info.forge_token_file}
    missing = {what for what, p in held.items() if p is not None and str(p) not in env.values()}
    assert not missing, f"nev box env points at none of: {missing}"
