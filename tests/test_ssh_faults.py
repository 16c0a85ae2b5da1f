"""Every command that connects says why it could not, the same way, with the same exit code: a
real jump host (sshd on 127.0.0.1) in front of a real lane (sshd on 127.0.0.2), and each SSH fault
planted in turn (`lanes.base.sshfail` classifies; docs/exit-codes.md: 3, cannot reach the rig)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from lanes.base import sshfail
from lanes.base.exitcodes import Exit
from lanes.base.ssh import Target
from tests.helpers import local_sshd
from tests.helpers.local_lane import make_repo

pytestmark = pytest.mark.parts  # starts two sshds here

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Rig:
    tmp: Path
    jump: local_sshd.LocalSshd
    lane: local_sshd.LocalSshd
    known_hosts: Path
    other_key: Path
    worktree: Path
    silent_port: int        # accepts TCP and never says a word: a banner that never comes

    @property
    def jump_spec(self) -> str:
        return f"{self.jump.user}@127.0.0.1:{self.jump.port}"

    @property
    def lane_spec(self) -> str:
        return f"{self.lane.user}@127.0.0.2:{self.lane.port}"

    def files(self, name: str, jump: str | None = None, lane: str | None = None,
              drop: str | None = None, change: str | None = None) -> dict[str, str]:
        """The settings of one planted fault: its lanes file, rig file and known_hosts."""
        d = self.tmp / name
        d.mkdir(exist_ok=True)
        jump, lane = jump or self.jump_spec, lane or self.lane_spec
        (d / "lanes.json").write_text(json.dumps({"jump": jump, "lanes": [
            {"ssh": lane, "root": str(d / "root")}]}))
        (d / "rig.json").write_text(json.dumps({"jump": jump, "forwards": {
            "forge": {"local_port": local_sshd.free_port(), "target": "127.0.0.2:9",
                      "check": "tcp"}}}))
        pub = self.other_key.with_suffix(".pub").read_text().split()
        lines = []
        for ln in self.known_hosts.read_text().splitlines():
            host = ln.split()[0]
            if drop and host.startswith(f"[{drop}]"):
                continue
            changed = change and host.startswith(f"[{change}]")
            lines.append(f"{host} {pub[0]} {pub[1]}" if changed else ln)
        (d / "known_hosts").write_text("".join(x + "\n" for x in lines))
        return {"NEV_LANES_FILE": str(d / "lanes.json"), "NEV_RIG_FILE": str(d / "rig.json"),
                "NEV_KNOWN_HOSTS": str(d / "known_hosts"), "NEV_STATE_DIR": str(d / "state"),
                "NEV_STATUS_FILE": str(d / "status")}


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    jump = local_sshd.start(tmp / "jump", "127.0.0.1")
    lane = local_sshd.start(tmp / "lane", "127.0.0.2")
    # one key for both hops, as on the rig
    (tmp / "lane" / "authorized_keys").write_text(jump.client_key.with_suffix(".pub").read_text())
    kh = tmp / "known_hosts"
    kh.write_text(jump.known_hosts.read_text() + lane.known_hosts.read_text())
    other = tmp / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    held: list[socket.socket] = []

    def hold() -> None:
        while True:
            try:
                held.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=hold, daemon=True).start()
    yield Rig(tmp, jump, lane, kh, other, make_repo(tmp / "wt"), silent.getsockname()[1])
    silent.close()
    for c in held:
        c.close()
    jump.stop()
    lane.stop()


def nev(args: list[str], env: dict[str, str], rig: Rig,
        timeout: float = 90) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    full.update({"PYTHONPATH": str(ROOT), "HOME": str(rig.tmp / "home"),
                 "NEV_SSH_KEY": str(rig.jump.client_key),
                 "XDG_CACHE_HOME": str(rig.tmp / "cache"), "NEV_LANE_MIN_FREE_GB": "0",
                 "NEV_INVENTORY": str(rig.tmp / "no-inventory.json")})
    full.update(env)
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=rig.tmp, env=full,
                          capture_output=True, text=True, timeout=timeout)


# (fault, what is planted, the cause's words, at the jump host)
FAULTS = {
    "jump name": (dict(jump="root@nosuch-jump.invalid"), {}, sshfail.Cause.RESOLVE, True),
    "jump refused": (dict(jump=f"root@127.0.0.1:{local_sshd.free_port()}"), {},
                     sshfail.Cause.REFUSED, True),
    "jump not pinned": (dict(drop="127.0.0.1"), {}, sshfail.Cause.NOT_PINNED, True),
    "lane refused": (dict(lane=f"root@127.0.0.2:{local_sshd.free_port()}"), {},
                     sshfail.Cause.REFUSED, False),
    "lane key changed": (dict(change="127.0.0.2"), {}, sshfail.Cause.CHANGED, False),
    "key file missing": ({}, {"NEV_SSH_KEY": "/nonexistent/id_rig"}, sshfail.Cause.KEY_FILE, None),
    "login refused": ({}, {"other": "1"}, sshfail.Cause.LOGIN, True),
}

COMMANDS = {
    "lane run": ["lane", "run", "{wt}", "true"],
    "lane list": ["lane", "list"],
    "lane install": ["lane", "install", "--lane", "0"],
    "dagu status": ["dagu", "status", "--lane", "0"],
    "rig services status": ["rig", "services", "status", "--lane", "0"],
    "rig status --lane 0": ["rig", "status", "--lane", "0"],
    "rig forward up": ["rig", "forward", "up", "--timeout", "8"],
}
LANE_FAULT_SKIPS = {"rig forward up"}   # the forwards go to the jump host only


def plant(rig: Rig, fault: str) -> dict[str, str]:
    files_kw, env, _, _ = FAULTS[fault]
    env = dict(env)
    if env.pop("other", None):
        env["NEV_SSH_KEY"] = str(rig.other_key)
    lane = files_kw.get("lane")
    if lane:
        files_kw = {**files_kw, "lane": lane.replace("root@", f"{rig.lane.user}@")}
    jump = files_kw.get("jump")
    if jump:
        files_kw = {**files_kw, "jump": jump.replace("root@", f"{rig.jump.user}@")}
    return {**rig.files(fault.replace(" ", "-"), **files_kw), **env}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_that_connects_names_the_cause_and_exits_3(rig, command):
    for fault, (_, _, cause, at_jump) in FAULTS.items():
        if command in LANE_FAULT_SKIPS and at_jump is False:
            continue
        args = [a.replace("{wt}", str(rig.worktree)) for a in COMMANDS[command]]
        env = plant(rig, fault)
        r = nev(args, env, rig)
        said = r.stdout + r.stderr
        assert r.returncode == Exit.UNAVAILABLE, f"{command} / {fault}: exit {r.returncode}\n{said}"
        assert cause.text in said, f"{command} / {fault}: no '{cause.text}' in\n{said}"
        if at_jump:
            assert "the jump host" in said, f"{command} / {fault}: the jump host not named\n{said}"
        elif at_jump is False:
            assert "127.0.0.2:" in said, said
            assert f"the jump host {rig.jump.user}@127.0.0.1" not in said, said
        assert "Traceback" not in said, said
        assert Path(env["NEV_STATUS_FILE"]).read_text() == "own 3 UNAVAILABLE\n"


def test_a_host_that_never_answers_times_out_in_seconds_with_its_cause(rig):
    env = plant(rig, "jump name")
    env.update(rig.files("silent", jump=f"{rig.jump.user}@127.0.0.1:{rig.silent_port}"))
    for args in (["lane", "list"], ["lane", "run", str(rig.worktree), "true"]):
        r = nev(args, env, rig)
        assert r.returncode == Exit.UNAVAILABLE, r.stderr
        said = r.stdout + r.stderr
        assert "the jump host" in said and "timed out" in said, said


def test_the_healthy_route_answers_and_the_status_line_says_whose_the_exit_is(rig):
    env = rig.files("healthy")
    r = nev(["lane", "list", "--json"], env, rig)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["answers"] is True
    # the remote command's 3 and nev's own 3 are told apart by the status line
    r = nev(["lane", "run", str(rig.worktree), "sh", "-c", "exit 3"], env, rig)
    assert r.returncode == 3 and Path(env["NEV_STATUS_FILE"]).read_text() == "command 3\n", r.stderr
    r = nev(["lane", "run", str(rig.worktree), "true"], plant(rig, "lane refused"), rig)
    assert r.returncode == 3
    assert (rig.tmp / "lane-refused" / "status").read_text() == "own 3 UNAVAILABLE\n"


def test_v_shows_the_exact_ssh_command(rig):
    env = plant(rig, "jump not pinned")
    for args in (["-v", "lane", "run", str(rig.worktree), "true"], ["-v", "lane", "list"]):
        r = nev(args, env, rig)
        assert r.returncode == 3
        line = next((ln for ln in r.stderr.splitlines() if " ssh -T -F none " in f" {ln}"
                     or "by hand: ssh " in ln), "")
        assert "StrictHostKeyChecking yes" in line and env["NEV_KNOWN_HOSTS"] in line, r.stderr
        assert "ProxyCommand" in line and f"-p {rig.lane.port}" in line, line


def test_a_failed_forward_up_leaves_nothing_running(rig):
    env = plant(rig, "jump name")
    r = nev(["rig", "forward", "up", "--timeout", "8"], env, rig)
    assert r.returncode == 3 and "name does not resolve" in r.stderr, r.stderr
    st = nev(["rig", "forward", "status", "--json"], env, rig)
    rows = json.loads(st.stdout)["forwards"]
    assert rows and not any(row.get("supervisor_pid") or row.get("ssh_pid") for row in rows), rows


@pytest.mark.parametrize("said, cause, at_jump", [
    ("ssh: Could not resolve hostname j.invalid: Name or service not known\r\n"
     "kex_exchange_identification: Connection closed by remote host", sshfail.Cause.RESOLVE, True),
    ("channel 0: open failed: connect failed: Connection refused\nstdio forwarding failed\n"
     "kex_exchange_identification: Connection closed by remote host", sshfail.Cause.REFUSED, False),
    ("channel 0: open failed: connect failed: Name or service not known\nstdio forwarding failed",
     sshfail.Cause.RESOLVE, False),
    ("@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
     "Host key for j.invalid has changed and you have requested strict checking.\n"
     "Host key verification failed.", sshfail.Cause.CHANGED, True),
    ("No ED25519 host key is known for [10.0.0.11]:2222 and you have requested strict checking.\n"
     "Host key verification failed.", sshfail.Cause.NOT_PINNED, False),
    ("lane@10.0.0.11: Permission denied (publickey).", sshfail.Cause.LOGIN, False),
    ("ssh: connect to host j.invalid port 22: Connection timed out", sshfail.Cause.TIMEOUT, True),
    ("Connection timed out during banner exchange\nConnection to UNKNOWN port 65535 timed out",
     sshfail.Cause.TIMEOUT, False),
    ("something new", sshfail.Cause.OTHER, False),
])
def test_the_clients_words_are_classified(said, cause, at_jump):
    f = sshfail.from_openssh(said, Target("10.0.0.11", "lane", 2222), Target("j.invalid", "me"))
    assert (f.cause, f.at_jump) == (cause, at_jump)
    line = f.line("lane@10.0.0.11:2222 via me@j.invalid")
    assert cause.text in line and cause.step in line and "\n" not in line


def test_rig_trust_shows_the_fingerprint_and_pins_only_after_confirmation(rig):
    env = plant(rig, "lane key changed")        # lane 1's pin is another key
    kh = Path(env["NEV_KNOWN_HOSTS"])
    before = kh.read_text()
    lane = rig.lane_spec
    real = subprocess.run(["ssh-keygen", "-lf", str(rig.tmp / "lane" / "host_ed25519.pub")],
                          capture_output=True, text=True, check=True).stdout.split()[1]
    full = {**env, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "trust", lane], input="n\n",
                       cwd=rig.tmp,
                       env={**os.environ, **full, "NEV_SSH_KEY": str(rig.jump.client_key)},
                       capture_output=True, text=True, timeout=60)
    said = r.stdout + r.stderr
    assert r.returncode == Exit.FAILED and real in r.stdout and "CHANGED" in r.stdout, said
    assert "through the jump host" in r.stdout and kh.read_text() == before
    r = nev(["rig", "trust", "--yes", lane], env, rig)
    assert r.returncode == 0 and f"pinned [127.0.0.2]:{rig.lane.port}" in r.stdout, r.stderr
    assert nev(["lane", "list"], env, rig).returncode == 0      # the lane answers now
    again = nev(["rig", "trust", "--yes", lane], env, rig)
    assert again.returncode == 0 and "already pinned" in again.stdout
    assert kh.read_text().count("[127.0.0.2]") == 1


def test_doctor_walks_the_jump_host_then_the_lane_and_a_flat_rig_has_no_jump_to_check(rig):
    import time

    t0 = time.monotonic()
    r = nev(["doctor", "--json"], plant(rig, "jump name"), rig)
    took = time.monotonic() - t0
    checks = {c["check"]: c for c in json.loads(r.stdout)}
    assert r.returncode == 1 and took < 30
    assert not checks["jump host: name resolves"]["ok"]
    assert "name does not resolve" in checks["jump host: name resolves"]["detail"]
    assert "lane 0: login" in checks and "not checked" in checks["lane 0: login"]["detail"]
    # the lane reached directly: no jump host declared is no failure, and the lane's login is ok
    flat = rig.files("flat")
    lanes = json.loads(Path(flat["NEV_LANES_FILE"]).read_text())
    del lanes["jump"]
    Path(flat["NEV_LANES_FILE"]).write_text(json.dumps(lanes))
    r = nev(["doctor", "--json"], flat, rig)
    checks = {c["check"]: c for c in json.loads(r.stdout)}
    assert checks["jump host"]["ok"] and checks["lane 0: login"]["ok"], checks


def test_a_kept_connection_whose_master_lost_its_link_is_replaced_once(rig):
    """A master that takes a client's session request and drops it (its lane restarted under it
    within NEV_SSH_PERSIST): the gate gives it up and connects anew, once, and keeps that one."""
    import struct

    from lanes.base import ssh

    env = rig.files("kept")
    environ = {**{k: v for k, v in os.environ.items() if not k.startswith("NEV_")},
               "HOME": str(rig.tmp / "home")}
    kept = ssh.control(Target.parse(rig.lane_spec), Target.parse(rig.jump_spec),
                       Path(env["NEV_KNOWN_HOSTS"]), rig.jump.client_key, environ)
    assert kept is not None
    path = kept[0]
    lost = socket.socket(socket.AF_UNIX)
    lost.bind(path)
    lost.listen(4)
    taken: list[int] = []

    def serve() -> None:
        while True:
            try:
                c, _ = lost.accept()
            except OSError:
                return
            c.sendall(struct.pack(">III", 8, 1, 4))     # the mux protocol's hello, version 4
            c.recv(4096)
            taken.append(1)
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        r = nev(["lane", "run", str(rig.worktree), "true"], env, rig)
        assert r.returncode == 0, r.stderr
        assert taken, "the lost master was never tried"
        check = subprocess.run(["ssh", "-O", "check", "-o", f"ControlPath {path}", "x"],
                               capture_output=True, text=True)
        assert check.returncode == 0 and "Master running" in check.stderr, check.stderr
    finally:
        lost.close()
        subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath {path}", "x"], capture_output=True)
