"""Snapshot and restore of the rig-in-a-box's own roles: its Debian HAProxy config in front of
the stand-in pools and the real LiteLLM gateway's config, keys file and master key.

The box's proxy and gateway hosts run no sshd of their own, so this test starts one in each
of their network namespaces (root login, its own pinned host key) and reaches them over the
box's bridge, as root on the roles' hosts. The box owns those HAProxy and LiteLLM processes,
so the roles here declare validate and health but no reload (the HAProxy reload itself is
proved in test_snapshot_rig.py on an HAProxy this suite owns)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PORT = 2222


@dataclass
class NsSshd:
    procs: list[subprocess.Popen]
    known_hosts: Path
    key: Path

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()


def start_sshd(box, tmp: Path, hosts: list[str]) -> NsSshd:
    Path("/run/sshd").mkdir(exist_ok=True)
    key = tmp / "client"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (tmp / "authorized_keys").write_text(key.with_suffix(".pub").read_text())
    os.chmod(tmp / "authorized_keys", 0o600)
    known, procs = [], []
    for h in hosts:
        addr, ns = box.hosts[h]["addr"], box.hosts[h]["netns"]
        hk = tmp / f"host_{h}"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hk)], check=True)
        cfg = tmp / f"sshd_{h}.conf"
        cfg.write_text(f"Port {PORT}\nListenAddress {addr}\nHostKey {hk}\nPidFile {tmp}/sshd_{h}.pid\n"
                       f"AuthorizedKeysFile {tmp}/authorized_keys\nPasswordAuthentication no\n"
                       "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nAllowUsers root\n"
                       "UsePAM no\nStrictModes no\n")
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)],
                                      stderr=subprocess.DEVNULL))
        kt, kb = hk.with_suffix(".pub").read_text().split()[:2]
        known.append(f"[{addr}]:{PORT} {kt} {kb}\n")
    kh = tmp / "known_hosts"
    kh.write_text("".join(known))
    deadline = time.monotonic() + 10
    for h in hosts:
        while box.run_in(h, ["bash", "-c", f"exec 3<>/dev/tcp/{box.hosts[h]['addr']}/{PORT}"]
                         ).returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.1)
    return NsSshd(procs, kh, key)


@pytest.fixture(scope="module")
def boxrig(box, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("snapbox")
    sshd = start_sshd(box, tmp, ["proxy", "gateway"])
    base = json.loads(Path(box.rig_file).read_text())
    proxy, gateway = base["roles"]["proxy"], base["roles"]["gateway"]
    pool = next(iter(box.pools.values()))
    gdir = Path(gateway["files"][0]).parent
    rig = {
        "known_hosts": str(sshd.known_hosts), "ssh_key": str(sshd.key), "host_store": str(tmp / "hoststore"),
        "roles": {
            "proxy": {**proxy, "hosts": [f"{proxy['hosts'][0]}:{PORT}"], "volatile": [r"\d{4}/\d{2}/\d{2}"],
                      "health": f"curl -fsS http://{box.proxy_addr}:{pool.proxy_port}/health"},
            "gateway": {**gateway, "hosts": [f"{gateway['hosts'][0]}:{PORT}"],
                        "files": [*gateway["files"], str(gdir / "keys.json"), str(box.master_key_file)],
                        "masks": ["master_key", r"re:(sk-nevbox-[A-Za-z0-9-]+)"],
                        "validate": "python3 -c 'import sys, yaml; yaml.safe_load(open(sys.argv[1]))' {path}",
                        "health": f"curl -fsS {box.gateway_url}/health/liveliness"},
        },
    }
    rf = tmp / "rig.local.json"
    rf.write_text(json.dumps(rig, indent=2))
    env = {**os.environ, "NEV_RIG_FILE": str(rf), "NEV_RIG_NOTES": str(tmp / "notes"),
           "NEV_LANES_FILE": str(box.lanes_file), "PYTHONPATH": str(ROOT)}

    def nev(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)

    yield nev, rig, tmp
    sshd.stop()


def test_box_roles_round_trip_with_real_haproxy_check_and_master_key_hidden(box, boxrig):
    nev, rig, tmp = boxrig
    cfg = Path(rig["roles"]["proxy"]["files"][0])
    master = Path(box.master_key_file).read_text().strip()
    original, mode = cfg.read_bytes(), stat.S_IMODE(cfg.stat().st_mode)
    runs = [nev("-v", "rig", "snapshot", "box-known-good")]
    assert runs[0].returncode == 0, runs[0].stderr
    try:
        cfg.write_bytes(original + b"# tried by hand\n")
        os.chmod(cfg, 0o600)
        runs.append(nev("-v", "rig", "diff", "box-known-good"))
        assert "+# tried by hand" in runs[-1].stdout and "# owner/mode:" in runs[-1].stdout
        runs.append(nev("-v", "rig", "restore", "box-known-good"))
        assert runs[-1].returncode == 0, runs[-1].stderr
        assert "validated, moved, healthy" in runs[-1].stdout
        assert "gateway: already as in box-known-good" in runs[-1].stdout
        assert cfg.read_bytes() == original and stat.S_IMODE(cfg.stat().st_mode) == mode
        pool = next(iter(box.pools.values()))
        r = box.run_in("proxy", ["curl", "-fsS", f"http://{box.proxy_addr}:{pool.proxy_port}/health"])
        assert r.returncode == 0
    finally:
        cfg.write_bytes(original)
        os.chmod(cfg, mode)
    notes = tmp / "notes"
    log = (notes / "changelog.md").read_text()
    assert "restore box-known-good [proxy, gateway]" in log
    for r in runs:
        assert master not in r.stdout and master not in r.stderr
    assert master not in log
    objects = list((notes / "snapshots" / "objects").iterdir())
    assert any(master.encode() in p.read_bytes() for p in objects)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in objects)


def test_box_proxy_config_failing_haproxy_check_is_not_restored(box, boxrig):
    nev, rig, tmp = boxrig
    from rig.snapshot.capture import FileRec
    from rig.snapshot.store import LocalStore

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
    before = cfg.read_bytes()
    try:
        r = nev("rig", "restore", "box-broken")
    finally:
        replaced = cfg.read_bytes() != before
        cfg.write_bytes(before)
    assert r.returncode == 1
    assert "role proxy failed at validate" in r.stderr and "chekc" in r.stderr
    assert not replaced
    assert not [p for p in cfg.parent.iterdir() if ".nev-" in p.name]
