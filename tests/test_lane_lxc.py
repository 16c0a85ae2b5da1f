"""The box's "lxc" lane backend and `nev lane provision`, on a real unprivileged LXC guest.

One guest is made by `rig.box.lanes_lxc.LxcLanes` on the session box's bridge (an address no box
lane uses), reached over SSH as a gate would, provisioned twice as root through apt-cacher-ng on
the bridge address, and removed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lanes import busy, provision
from lanes.base.ssh import Connection, Target
from lanes.hostexec import Node
from rig.box import plan
from rig.box.lanes_lxc import LxcLanes
from rig.box.lanes_netns import client_key, host_toolchain
from rig.box.state import LaneInfo

ROOT = Path(__file__).resolve().parent.parent
ACNG_CACHE = Path("/var/cache/nev-apt-cacher")   # kept between runs: packages come once


def connect(target: str, known_hosts: Path, key: Path, wait: float = 20, jump: str | None = None) -> Connection:
    """A guest on the rig network, through the jump host (pinned in `known_hosts` too)."""
    t0 = time.monotonic()
    while True:
        try:
            return Connection(Target.parse(target), known_hosts=known_hosts, key_file=key,
                              jump=Target.parse(jump) if jump else None).connect()
        except Exception:  # noqa: BLE001 - sshd still starting
            if time.monotonic() - t0 > wait:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="module")
def guest(box):
    """A lane made by the lxc backend: (LaneInfo, known_hosts file, backend)."""
    backend = LxcLanes(box.dir, box.dir / "logs")
    d = box.dir / "lanes" / "lane7"
    lane = LaneInfo(index=7, name="lane7", netns=f"{box.name}-lane7", addr=f"{box.net}.77",
                    ssh=f"lane@{box.net}.77:22", root="/srv/lane", shared="/srv/lane-shared",
                    host_root=d / "root", host_home=d / "home")
    host = plan.Host("lane7", "lane", lane.addr, lane.netns, lane.netns)
    pub = client_key(box.ssh_key)
    hostkey = backend.prepare(lane, host, pub)
    kh = d / "known_hosts"     # the guest's pinned key, and the jump host's
    kh.write_text(plan.known_hosts_lines([(lane.addr, hostkey)]) + "".join(
        ln + "\n" for ln in box.known_hosts.read_text().splitlines() if ln.startswith(box.jump_addr + " ")))
    rec = backend.start(lane, host, None)
    assert rec is not None
    try:
        backend.wait(lane, rec)
        yield lane, kh, backend, rec
    finally:
        backend.remove(d)
        shutil.rmtree(d, ignore_errors=True)


def test_lxc_backend_lane_answers_ssh_as_lane_and_runs_a_gate_style_command(box, guest):
    lane, kh, _backend, rec = guest
    with connect(f"lane@{lane.addr}", kh, box.ssh_key, jump=box.jump) as c:
        res = c.run("id -un; cd /srv/lane && git init -q g && git -C g rev-parse --is-inside-work-tree; "
                    "python3 -c 'print(6*7)'; cargo --version; echo x > /srv/lane-shared/lxc-mark; "
                    "cat /proc/self/uid_map; ls /proc/1/root 2>&1 | head -1", check=True)
    out = res.out.splitlines()
    assert out[0] == "lane" and out[1] == "true" and out[2] == "42"
    if host_toolchain() is not None:
        assert out[3].startswith("cargo ")
    assert "100000" in res.out                                    # unprivileged id map
    assert (lane.host_root / "g" / ".git").is_dir()               # /srv/lane is the box's lane folder
    assert (box.nas / "lxc-mark").stat().st_uid == 101000         # the NAS, written as the guest's lane
    (box.nas / "lxc-mark").unlink()
    # run_in's way into a lane: nsenter the recorded init, which sees the same /srv/lane
    cp = subprocess.run(["nsenter", "-t", str(rec.pid), "-n", "-m", "--", "ls", "/srv/lane"],
                        capture_output=True, text=True)
    assert "g" in cp.stdout.split()


@pytest.fixture(scope="module")
def apt_proxy(box, tmp_path_factory):
    """The rig's apt cache: apt-cacher-ng here (it needs the package mirror, which the rig network
    cannot reach), offered to the guests on the rig network at the bridge's address through a
    relay (`tests/helpers/netrelay.py`). The guests' only way to packages."""
    from tests.helpers.netrelay import Relay

    run = tmp_path_factory.mktemp("acng")
    ACNG_CACHE.mkdir(parents=True, exist_ok=True)
    port = 3142
    # Its own config: Debian's remaps send deb.debian.org to other mirrors; this one only proxies.
    (run / "acng.conf").write_text(f"CacheDir: {ACNG_CACHE}\nLogDir: {run}\nPort: {port}\n"
                                   f"BindAddress: 127.0.0.1\nPidFile: {run}/pid\nSocketPath: {run}/sock\n"
                                   "ForeGround: 1\nExThreshold: 4\n")
    p = subprocess.Popen(["/usr/sbin/apt-cacher-ng", "-c", str(run)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    relay = None
    try:
        from rig.box.waits import wait_port
        wait_port("127.0.0.1", port, 10)
        relay = Relay(box.rig_netns, (box.bridge_addr, port), ("127.0.0.1", port))
        yield f"http://{box.bridge_addr}:{port}"
    finally:
        if relay is not None:
            relay.close()
        p.terminate()
        p.wait(10)


def _nev(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)


def test_guest_missing_a_browser_fails_the_engine_check_naming_it_and_provision_twice_fixes_it(
        box, guest, apt_proxy, tmp_path):
    lane, kh, _b, _r = guest
    lanes_file = tmp_path / "lanes.json"
    lanes_file.write_text(json.dumps({"jump": box.jump, "lanes": [{"ssh": f"lane@{lane.addr}", "root": "/srv/lane",
                                                                   "shared": "/srv/lane-shared"}]}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NEV_LANES_FILE": str(lanes_file), "NEV_KNOWN_HOSTS": str(kh),
           "NEV_SSH_KEY": str(box.ssh_key), "NEV_LANE_APT_PROXY": apt_proxy,
           "NEV_LANE_MODEL_URL": box.gateway_url, "LANE_WRITER_SETUP": "echo \"$LANE_WRITER_TOOL\" > ~/writer-ready",
           "LANE_WRITER_TOOL": "sometool", "LANE_WRITER_DIRS": "srv-lane"}
    env.pop("NEV_LANE_SSH", None)
    # A guest without Firefox: its package removed as the guest's root.
    with connect(f"root@{lane.addr}", kh, box.ssh_key, jump=box.jump) as c:
        c.run("export PATH=/usr/sbin:/sbin:$PATH; dpkg -r --force-depends firefox-esr >/dev/null 2>&1; "
              "! command -v firefox-esr", check=True)
    inst = _nev(["lane", "install"], env)
    assert inst.returncode == 0, inst.stderr
    with connect(f"lane@{lane.addr}", kh, box.ssh_key, jump=box.jump) as c:
        res = c.run("cd /srv/lane && ~/.local/bin/nev oracle build block_width --cases 5")
    assert res.exit_status == 1, res.out + res.err
    assert f"engine firefox not found on {box.name}-lane7" in res.err and "package firefox-esr" in res.err, res.err

    first = _nev(["lane", "provision"], env)          # the whole declared list, through the apt proxy
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"lane 0: changed: packages {' '.join(provision.GATE_PACKAGES)}" in first.stdout
    assert "lane 0: changed: ~/.lane-model-env" in first.stdout
    if host_toolchain() is not None:   # Rust is the node's, bound read-only, and named so
        rust = next(ln for ln in first.stdout.splitlines() if "rust >= " in ln)
        assert rust.startswith(f"lane 0: unchanged: rust >= {provision.engine_rust_min()} (the engine's minimum): "
                               "cargo ") and "the node's toolchain bound read-only at /srv/toolchain" in rust, rust
    second = _nev(["lane", "provision"], env)
    assert second.returncode == 0, second.stderr
    lines = second.stdout.splitlines()
    assert lines and all(ln.startswith("lane 0: unchanged: ") for ln in lines), second.stdout
    assert len(lines) == len(first.stdout.splitlines())
    with connect(f"lane@{lane.addr}", kh, box.ssh_key, jump=box.jump) as c:
        res = c.run("cat ~/.lane-shared-env ~/.lane-model-env ~/writer-ready; node -e 'console.log(1+1)'; "
                    "git -C /srv/lane/.git-mirror rev-parse --is-bare-repository; test -d /srv/lane-shared/npm-cache",
                    check=True)
        built = c.run("cd /srv/lane && ~/.local/bin/nev oracle build block_width --cases 5")
    assert res.out.splitlines() == ["NEV_LANE_SHARED=/srv/lane-shared", "npm_config_cache=/srv/lane-shared/npm-cache",
                                    f"NEV_LANE_MODEL_URL={box.gateway_url}", "sometool", "2", "true"]
    assert built.exit_status == 0, built.out + built.err   # the provisioned guest's own three browsers
    assert "agreed of 5 generated" in built.out + built.err


def test_guest_sees_none_of_this_machines_files_but_what_is_bound_on_purpose(box, guest, tmp_path):
    lane, kh, _b, _r = guest
    probe = Path("/tmp") / f"nev-isolation-{os.getpid()}"
    probe.write_text("the dev box's\n")
    probe.chmod(0o644)
    outside = [str(probe), str(ROOT / "pyproject.toml"), str(box.dir / "box.json"), "/var/lib/nev-box",
               sys.prefix, "/root/.cargo", "/etc/nev-box-never"]
    try:
        with connect(f"lane@{lane.addr}", kh, box.ssh_key, jump=box.jump) as c:
            res = c.run("for p in " + " ".join(outside) + "; do test -e \"$p\" && echo \"seen $p\"; done; "
                        "cat /proc/self/mountinfo", check=True)
    finally:
        probe.unlink()
    assert not [ln for ln in res.out.splitlines() if ln.startswith("seen ")], res.out
    # Every mount of this machine's own filesystem in the guest is a bind made on purpose.
    dev = os.stat("/").st_dev
    ours = f"{os.major(dev)}:{os.minor(dev)}"
    binds = {}
    for ln in res.out.splitlines():
        f = ln.split()
        if len(f) > 5 and f[2] == ours:
            binds[f[4]] = "ro" if f[5].split(",")[0] == "ro" else "rw"
    want = {"/srv/lane": "rw", "/home/lane": "rw", "/srv/lane-shared": "rw"}
    if host_toolchain() is not None:
        want.update({"/srv/toolchain/rustup": "ro", "/srv/toolchain/cargo-bin": "ro"})
    assert binds == want


def test_busy_test_names_only_listed_processes(box, guest):
    lane, kh, _b, _r = guest
    assert busy.busy_processes("  1 init.lxc\n 22 cargo\n 23 rustc-wrapper\n 24 node\n", "cargo|rustc|node") == [
        (22, "cargo"), (24, "node")]
    assert busy.pattern({"LANE_BUSY_COMMANDS": "cargo|pi"}) == "cargo|pi"
    assert busy.pattern({}) == "cargo|rustc|node"
    with connect(f"lane@{lane.addr}", kh, box.ssh_key, jump=box.jump) as c:
        assert busy.lane_busy(c, "cargo|rustc|node") == []
        c.run("setsid sleep 30 </dev/null >/dev/null 2>&1 &", check=True)
        time.sleep(0.3)
        found = busy.lane_busy(c, "sleep")
        for pid, _ in found:
            c.run(f"kill {pid}")
    assert [n for _, n in found] == ["sleep"]


def test_provision_plan_writes_no_credential_of_the_model_url():
    steps = provision.plan(provision.Params(model_url="http://u:secret@10.0.0.20:4000/", packages=()))
    text = provision.script(steps)
    assert "secret" not in text and "NEV_LANE_MODEL_URL=http://10.0.0.20:4000/" in text


def test_provision_runs_the_writer_setup_only_when_given_and_again_when_its_settings_change():
    assert provision.Writer.from_env({"LANE_WRITER_TOOL": "pi"}) is None
    assert not [s for s in provision.plan(provision.Params(packages=())) if "WRITER" in s.name]

    def step(env: dict[str, str]) -> provision.Step:
        [s] = [s for s in provision.plan(provision.Params(packages=(), writer=provision.Writer.from_env(env)))
               if s.name == "writer host: LANE_WRITER_SETUP"]
        return s

    a = step({"LANE_WRITER_SETUP": "./setup.sh", "LANE_WRITER_TOOL": "pi", "LANE_WRITER_DIRS": "srv"})
    assert "LANE_WRITER_TOOL=pi LANE_WRITER_DIRS=srv sh -c ./setup.sh" in a.apply
    assert step({"LANE_WRITER_SETUP": "./setup.sh", "LANE_WRITER_TOOL": "pi"}).check != a.check


def test_provision_node_runs_scripts_on_stdin():
    ran = Node("local").run("read x; echo got-$x\n", check=False)   # the script itself is stdin
    assert ran.exit_status == 0 and ran.out.strip() == "got-"
