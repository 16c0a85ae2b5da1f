"""Snapshot and restore of the rig-in-a-box's own roles, through the box's own rig file: its
Debian HAProxy (master-worker, reloaded with USR2) in front of the stand-in pools, and the
real LiteLLM gateway's config. Reached as root over SSH on the box's proxy and gateway hosts
(the box's sshd there, host keys pinned in the box's known_hosts).

The box's gateway role lists config.yaml and the keys file (its master key comes from the
environment); this test adds the master key file, the rest of the gateway's key database, so
the snapshot holds the master key as the seed's does."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rig.box.haproxy import command as haproxy_command
from rig.box.netns import run_in
from rig.snapshot.capture import FileRec
from rig.snapshot.store import LocalStore

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def boxrig(box, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("snapbox")
    rig = json.loads(Path(box.rig_file).read_text())
    gw = rig["roles"]["gateway"]
    gdir = Path(gw["files"][0]).parent
    gw["files"] += [f for f in (str(gdir / "keys.json"), str(box.master_key_file)) if f not in gw["files"]]
    gw["masks"] = [*gw.get("masks", []), r"re:(sk-nevbox-[A-Za-z0-9-]+)"]
    rig["host_store"] = str(tmp / "hoststore")
    rf = tmp / "rig.local.json"
    rf.write_text(json.dumps(rig, indent=2))
    env = {**os.environ, **box.env, "NEV_RIG_FILE": str(rf), "NEV_RIG_NOTES": str(tmp / "notes"),
           "PYTHONPATH": str(ROOT)}

    def nev(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)

    return nev, rig, tmp


def worker_pid(box) -> str:
    info = haproxy_command(Path(box.proxy_stats_socket), "show info")
    return next(ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("Pid:"))


def through_proxy(box) -> list[int]:
    codes = []
    for pool in box.pools.values():
        r = run_in(box, "proxy", ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--noproxy", "*",
                                 f"http://{box.proxy_addr}:{pool.proxy_port}/health"])
        codes.append(int(r.stdout or 0))
    return codes


def test_box_roles_round_trip_reloads_haproxy_and_keeps_master_key_hidden(box, boxrig):
    nev, rig, tmp = boxrig
    cfg = Path(rig["roles"]["proxy"]["files"][0])
    master = Path(box.master_key_file).read_text().strip()
    original, mode = cfg.read_bytes(), stat.S_IMODE(cfg.stat().st_mode)
    runs = [nev("-v", "rig", "snapshot", "box-known-good")]
    assert runs[0].returncode == 0, runs[0].stderr
    try:
        # a working change: a pool's maxconn raised, the file's mode tightened, then reloaded by hand
        changed = original.replace(b"maxconn 8\n", b"maxconn 9\n", 1)
        assert changed != original
        cfg.write_bytes(changed)
        os.chmod(cfg, 0o600)
        runs.append(nev("-v", "rig", "snapshot", "box-maxconn-9"))
        runs.append(nev("-v", "rig", "diff", "box-known-good", "box-maxconn-9"))
        assert "+    server" in runs[-1].stdout and "maxconn 9" in runs[-1].stdout
        assert "# owner/mode:" in runs[-1].stdout
        pid = worker_pid(box)
        runs.append(nev("-v", "rig", "restore", "box-known-good"))
        assert runs[-1].returncode == 0, runs[-1].stderr
        assert "validated, moved, reloaded, healthy" in runs[-1].stdout
        assert "gateway: already as in box-known-good" in runs[-1].stdout
        assert cfg.read_bytes() == original and stat.S_IMODE(cfg.stat().st_mode) == mode
        assert worker_pid(box) != pid  # HAProxy's master started a new worker on the restored config
        assert through_proxy(box) == [200] * len(box.pools)
    finally:
        cfg.write_bytes(original)
        os.chmod(cfg, mode)
    notes = tmp / "notes"
    log = (notes / "changelog.md").read_text()
    assert "restore box-known-good [proxy, gateway, sudo-gpu0]" in log     # gpu0's sudoers drop-in too
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert master not in r.stdout and master not in r.stderr
    assert master not in log
    objects = list((notes / "snapshots" / "objects").iterdir())
    assert any(master.encode() in p.read_bytes() for p in objects)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in objects)


def test_box_proxy_config_failing_haproxy_check_is_not_restored(box, boxrig):
    nev, rig, tmp = boxrig
    cfg = Path(rig["roles"]["proxy"]["files"][0])
    assert nev("rig", "snapshot", "box-base", "proxy").returncode == 0
    st = LocalStore(tmp / "notes")
    m = st.read_manifest("box-base")
    bad = cfg.read_bytes() + b"backend be_broken\n    server x 127.0.0.1:1 chekc\n"
    sha = st.put_blob(bad)
    for s in m.roles["proxy"].values():
        s.files = [FileRec(f.path, False, f.uid, f.gid, f.user, f.group, f.mode, len(bad), sha) for f in s.files]
    m.label = "box-broken"
    st.write_manifest(m)
    before, pid = cfg.read_bytes(), worker_pid(box)
    try:
        r = nev("rig", "restore", "box-broken")
    finally:
        replaced = cfg.read_bytes() != before
        cfg.write_bytes(before)
    assert r.returncode == 1
    assert "role proxy failed at validate" in r.stderr and "exited 1" in r.stderr
    assert "nothing was replaced" in r.stderr
    assert not replaced and worker_pid(box) == pid
    assert not [p for p in cfg.parent.iterdir() if ".nev-" in p.name]
    assert through_proxy(box) == [200] * len(box.pools)
