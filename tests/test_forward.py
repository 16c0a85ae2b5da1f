"""`nev rig forward`: real sshd as the jump host, real HTTP servers as forge and gateway, real crontab."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lanes.base import crontab, procs
from lanes.base.errors import ConfigError
from rig import rigfile
from rig.forward import check, control
from rig.forward import state as st
from rig.forward.supervise import FIRST, MAX, STABLE, next_delay
from tests.helpers import local_sshd
from tests.helpers.lane_helpers import nev
from tests.helpers.local_sshd import free_port

pytestmark = pytest.mark.parts  # starts a jump host's sshd and OpenSSH forwards here


class _Forge(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="forge"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a: object) -> None:
        pass


class _Gateway(_Forge):
    def do_GET(self) -> None:  # noqa: N802
        ok = self.path == "/health/liveliness"
        body = b'"I\'m alive!"' if ok else b"not found"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def jump(tmp_path_factory) -> Iterator[local_sshd.LocalSshd]:
    d = local_sshd.start(tmp_path_factory.mktemp("jump"))
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture(scope="module")
def services() -> Iterator[dict[str, int]]:
    servers = {name: ThreadingHTTPServer(("127.0.0.1", 0), h) for name, h in (("forge", _Forge), ("gateway", _Gateway))}
    for s in servers.values():
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        yield {name: s.server_address[1] for name, s in servers.items()}
    finally:
        for s in servers.values():
            s.shutdown()
            s.server_close()


def _rig_doc(jump: local_sshd.LocalSshd, services: dict[str, int], known_hosts: Path) -> dict:
    return {
        "jump": f"{jump.user}@127.0.0.1:{jump.port}",
        "known_hosts": str(known_hosts),
        "ssh_key": str(jump.client_key),
        "forwards": {
            "forge": {"local_port": free_port(), "target": f"127.0.0.1:{services['forge']}", "check": "forge"},
            "gateway": {"local_port": free_port(), "target": f"127.0.0.1:{services['gateway']}",
                        "check": "gateway"},
        },
    }


def _recorded_procs(state_dir: Path) -> list[st.Proc]:
    out = []
    for f in (state_dir / "forwards").glob("*/*.json"):
        rec = json.loads(f.read_text())
        out += [st.Proc(**rec[k]) for k in ("supervisor", "ssh") if rec.get(k)]
    return out


class Rig:
    """One test's rig file, state folder and environment; `down` and a PID sweep at the end."""

    def __init__(self, tmp: Path, doc: dict) -> None:
        self.tmp = tmp
        self.file = tmp / "rig.local.json"
        self.state = tmp / "state"
        self.doc = doc
        self.file.write_text(json.dumps(doc))
        self.env = {"NEV_RIG_FILE": str(self.file), "NEV_STATE_DIR": str(self.state)}
        # one folder per rig file: <stem>-<digest of its absolute path>
        digest = hashlib.sha256(str(self.file.absolute()).encode()).hexdigest()[:8]
        self.folder = self.state / "forwards" / f"rig.local-{digest}"
        self.seen: set[st.Proc] = set()

    def nev(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        r = nev(["rig", "forward", *args], self.env, timeout=timeout)
        self.seen |= set(_recorded_procs(self.state))
        return r

    def status(self) -> dict:
        r = self.nev("status", "--json")
        doc = json.loads(r.stdout)
        assert r.returncode == (0 if doc["all_up"] else 1), r.stderr
        return {f["name"]: f for f in doc["forwards"]}

    def record(self, name: str) -> dict:
        return json.loads((self.folder / f"{name}.json").read_text())

    def port(self, name: str) -> int:
        return int(self.doc["forwards"][name]["local_port"])

    def close(self) -> None:
        self.nev("down")
        for p in self.seen | set(_recorded_procs(self.state)):  # never leave one behind
            procs.stop(p.rec(), grace=1.0)


@pytest.fixture
def rig(tmp_path, jump, services) -> Iterator[Rig]:
    r = Rig(tmp_path, _rig_doc(jump, services, jump.known_hosts))
    try:
        yield r
    finally:
        r.close()


def _wait(pred, timeout: float, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(every)
    return None


# -- with a real jump host ------------------------------------------------------------------------

def test_up_brings_both_forwards_up_and_a_second_up_is_a_no_op(rig):
    t0 = time.monotonic()
    r = rig.nev("up")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    fg, gw = rig.doc["forwards"]["forge"], rig.doc["forwards"]["gateway"]
    assert f"forge 127.0.0.1:{fg['local_port']} -> {fg['target']} up" in r.stdout
    assert f"gateway 127.0.0.1:{gw['local_port']} -> {gw['target']} up" in r.stdout
    s = rig.status()
    assert s["forge"]["state"] == "up" and s["forge"]["answer"] == "HTTP 401"
    assert s["gateway"]["state"] == "up" and s["gateway"]["answer"] == "HTTP 200"
    assert s["forge"]["restarts"] == 0 and s["forge"]["since"] and s["forge"]["ssh"]
    sups = {n: rig.record(n)["supervisor"] for n in ("forge", "gateway")}

    again = rig.nev("up")
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already running") == 2
    assert {n: rig.record(n)["supervisor"] for n in ("forge", "gateway")} == sups
    print(f"up took {took:.2f} s")  # measured: see the report in docs/forwards.md


def test_status_json_shape_and_text(rig):
    up = rig.nev("up", "--json")                 # the lines on stderr, the forwards' states as JSON
    assert up.returncode == 0, up.stderr
    doc = json.loads(up.stdout)
    assert doc["all_up"] and {f["name"] for f in doc["forwards"]} == {"forge", "gateway"}
    assert " up" in up.stderr
    r = rig.nev("status")
    assert r.returncode == 0
    assert "forge" in r.stdout and "HTTP 401" in r.stdout and "since" in r.stdout
    f = rig.status()["forge"]
    assert set(f) >= {"name", "local", "target", "check", "state", "up", "answer", "since", "restarts",
                      "supervisor", "ssh", "last_exit", "log"}


def test_killed_client_is_down_then_back_within_10s_with_a_new_since(rig):
    assert rig.nev("up").returncode == 0
    before = rig.record("forge")
    gw_before = rig.record("gateway")
    os.kill(before["ssh"]["pid"], signal.SIGKILL)
    t0 = time.monotonic()
    # The port closes with the client (its files are closed before it is a zombie): from then on,
    # until the next client listens, a request finds the forward down.
    assert _wait(lambda: procs.start_time(before["ssh"]["pid"]) is None, 2.0)
    assert not check.probe("forge", rig.port("forge")).up
    seen = rig.status()["forge"]
    assert seen["state"] == "down" or (seen["restarts"] == 1 and seen["since"] != before["since"])
    print(f"status right after the kill: {seen['state']}")

    assert _wait(lambda: check.probe("forge", rig.port("forge")).up, 10.0, every=0.02), "not back within 10 s"
    took = time.monotonic() - t0
    f = rig.status()["forge"]
    assert f["state"] == "up" and f["restarts"] == 1, f
    assert f["since"] != before["since"] and f["ssh"] != before["ssh"]["pid"]
    after = rig.record("forge")
    assert after["supervisor"] == before["supervisor"]
    assert "killed by signal 9" in after["last_exit"]["why"]
    assert rig.record("gateway")["restarts"] == gw_before["restarts"] == 0
    print(f"back after {took:.2f} s")


def test_a_supervisor_whose_rig_file_is_gone_stops_by_itself(rig):
    """A rig-in-a-box folder removed without `down`: nobody would stop its forwards any more."""
    assert rig.nev("up").returncode == 0
    rec = rig.record("forge")
    sup = st.Proc(**rec["supervisor"])
    rig.file.rename(rig.file.with_suffix(".gone"))
    try:
        os.kill(rec["ssh"]["pid"], signal.SIGKILL)          # its next restart finds the file gone
        assert _wait(lambda: not sup.alive(), 10.0), "the supervisor kept running"
        assert "rig file" in rig.record("forge")["last_exit"]["why"]
        assert rig.record("gateway")["ssh"] is not None      # the other one was not touched
    finally:
        rig.file.with_suffix(".gone").rename(rig.file)


def test_down_leaves_no_supervisor_or_client(rig):
    assert rig.nev("up").returncode == 0
    recorded = _recorded_procs(rig.state)
    assert len(recorded) == 4 and all(p.alive() for p in recorded)
    r = rig.nev("down")
    assert r.returncode == 0, r.stderr
    assert "forge: stopped (supervisor" in r.stdout and "gateway: stopped" in r.stdout
    for p in recorded:
        assert procs.start_time(p.pid) != p.start, f"pid {p.pid} still runs"
    assert not list(rig.folder.glob("*.json"))
    assert rig.status()["forge"]["state"] == "down"
    assert "was not running" in rig.nev("down", "forge").stdout


def test_a_killed_supervisor_takes_its_client_along_and_up_starts_a_new_one(rig):
    assert rig.nev("up").returncode == 0
    rec = rig.record("gateway")
    sup, client = st.Proc(**rec["supervisor"]), st.Proc(**rec["ssh"])
    os.kill(sup.pid, signal.SIGKILL)
    assert _wait(lambda: not client.alive(), 5.0), "the client outlived its supervisor"
    s = rig.status()["gateway"]
    assert s["state"] == "down" and s["supervisor"] is None
    r = rig.nev("up")
    assert r.returncode == 0, r.stderr
    assert "forge" in r.stdout and "already running" in r.stdout and "gateway 127.0.0.1" in r.stdout
    assert rig.record("gateway")["supervisor"]["pid"] != sup.pid


@pytest.mark.parametrize("pin", ["unknown", "changed"])
def test_a_jump_host_key_not_pinned_is_refused(tmp_path, jump, services, pin):
    kh = tmp_path / "known_hosts"
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    name = f"[127.0.0.1]:{jump.port}" if pin == "changed" else "[127.0.0.1]:1"
    kh.write_text(f"{name} {' '.join(other.with_suffix('.pub').read_text().split()[:2])}\n")
    r = Rig(tmp_path, _rig_doc(jump, services, kh))
    try:
        t0 = time.monotonic()
        res = r.nev("up", "--timeout", "20")
        assert res.returncode == 3      # cannot reach the rig: one code in every command
        assert time.monotonic() - t0 < 15  # a refused key is not waited out
        lines = res.stderr.strip().splitlines()
        assert any(ln.startswith("forge 127.0.0.1:") and "host key" in ln for ln in lines), res.stderr
        assert ("is not pinned" if pin == "unknown" else "does not match") in res.stderr
        assert "did not come up: forge, gateway" in lines[-1] or "did not come up: gateway, forge" in lines[-1]
        s = r.status()
        assert s["forge"]["state"] == "down" and s["gateway"]["state"] == "down"
        assert not [p for p in r.seen if p.alive()], "a refused forward left a process running"
    finally:
        r.close()


def test_a_port_in_use_is_named_and_nothing_starts(rig):
    with socket.socket() as s:
        s.bind(("127.0.0.1", rig.port("forge")))
        s.listen(1)
        r = rig.nev("up")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert f"port {rig.port('forge')} on 127.0.0.1 is in use" in r.stderr
    assert not _recorded_procs(rig.state)


def test_install_twice_leaves_one_line_and_uninstall_removes_only_it(rig):
    before = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    original = before.stdout if before.returncode == 0 else None
    other = f"0 3 * * * true # someone else's line {rig.tmp}\n"
    tag = f"# nev-rig-forward {rig.file}"
    try:
        subprocess.run(["crontab", "-"], input=(original or "") + other, check=True, text=True)
        env_before = dict(rig.env)
        rig.env["NEV_FORGE_TOKEN"] = "tok-should-not-appear"
        for _ in range(2):
            r = rig.nev("up", "--install")
            assert r.returncode == 0, r.stderr
        rig.env = env_before
        table = crontab.read()
        ours = [ln for ln in table.splitlines() if ln.endswith(tag)]
        assert len(ours) == 1 and ours[0].startswith("@reboot ") and "rig forward up" in ours[0]
        assert f"NEV_RIG_FILE={rig.file}" in ours[0] and f"NEV_STATE_DIR={rig.state}" in ours[0]
        assert "tok-should-not-appear" not in table and other.strip() in table
        r = rig.nev("down", "--uninstall")
        assert r.returncode == 0, r.stderr
        table = crontab.read()
        assert tag not in table and other.strip() in table
    finally:
        if original is None:
            subprocess.run(["crontab", "-r"], capture_output=True)
        else:
            subprocess.run(["crontab", "-"], input=original, text=True)


def test_the_installed_line_brings_the_forwards_up_as_cron_would(rig):
    """Run the @reboot line's command with cron's bare environment: the forwards come up."""
    line = control.cron_line(rig.file, {**os.environ, **rig.env, "NEV_FORGE_TOKEN": "tok-x"})
    assert "tok-x" not in line
    cmd = line.removeprefix("@reboot ").rsplit(" # nev-rig-forward ", 1)[0]
    cp = subprocess.run(["/bin/sh", "-c", cmd], env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
                        cwd="/", capture_output=True, text=True, timeout=60)
    rig.seen |= set(_recorded_procs(rig.state))
    assert cp.returncode == 0, (rig.state / "forwards" / "boot.log").read_text()
    assert "forge 127.0.0.1:" in (rig.state / "forwards" / "boot.log").read_text()
    assert all(f["state"] == "up" for f in rig.status().values())


# -- errors in one line -----------------------------------------------------------------------------

def test_missing_rig_file_no_forwards_and_no_jump_each_say_what_to_add(tmp_path):
    env = {"NEV_RIG_FILE": str(tmp_path / "rig.local.json"), "NEV_STATE_DIR": str(tmp_path / "s")}
    for doc, want in ((None, "rig file not found"), ({"jump": "root@j"}, "no forwards declared; add"),
                      ({"forwards": {"forge": {"local_port": 18080, "target": "10.0.0.5:80"}}},
                       "field jump is missing")):
        if doc is not None:
            (tmp_path / "rig.local.json").write_text(json.dumps(doc))
        for args in (["up"], ["status"]):
            r = nev(["rig", "forward", *args], env)
            assert r.returncode == 1, r.stdout
            assert len(r.stderr.strip().splitlines()) == 1 and want in r.stderr
            assert str(tmp_path / "rig.local.json") in r.stderr


# -- pure parts -------------------------------------------------------------------------------------

def _load(tmp_path: Path, forwards: dict, **top: object) -> rigfile.RigFile:
    p = tmp_path / "rig.local.json"
    p.write_text(json.dumps({"jump": "root@jump-host", **top, "forwards": forwards}))
    return rigfile.load(p)


@pytest.mark.parametrize("fw, field, problem", [
    ({"forge": {"local_port": "18080", "target": "h:80"}}, "forwards.forge.local_port", "whole number"),
    ({"forge": {"local_port": 70000, "target": "h:80"}}, "forwards.forge.local_port", "port number"),
    ({"forge": {"local_port": 18080}}, "forwards.forge.target", "is missing"),
    ({"forge": {"local_port": 18080, "target": "h"}}, "forwards.forge.target", "host:port"),
    ({"forge": {"local_port": 18080, "target": "h:80", "check": "ping"}}, "forwards.forge.check", "one of"),
    ({"forge": {"local_port": 18080, "target": "h:80", "port": 1}}, "forwards.forge.port",
     "is not a known key (known: local_port, target, check)"),
    ({"forge": {"local_port": 1, "target": "h:80"}, "gw": {"local_port": 1, "target": "g:1"}},
     "forwards.gw.local_port", "also forwards.forge's"),
    ({"a b": {"local_port": 1, "target": "h:80"}}, "forwards.a b", "bad name"),
    ({"forge": []}, "forwards.forge", "must be an object"),
])
def test_rig_file_forward_errors_name_file_and_field(tmp_path, fw, field, problem):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, fw)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'rig.local.json'}: field {field} ") and problem in msg
    assert "\n" not in msg


def test_rig_file_forwards_parse(tmp_path):
    rig = _load(tmp_path, {"forge": {"local_port": 18080, "target": "10.0.0.5:80", "check": "forge"},
                           "db": {"local_port": 15432, "target": "[fd00::5]:5432"}})
    assert rig.forwards["forge"] == rigfile.Forward("forge", 18080, "10.0.0.5", 80, "forge")
    assert rig.forwards["db"].check == "tcp" and rig.forwards["db"].target == "[fd00::5]:5432"
    assert rig.roles == {}


def test_the_example_rig_file_declares_forwards(tmp_path, monkeypatch):
    from tests.helpers import rig_example

    rig = rigfile.load(rig_example.with_keys(tmp_path, monkeypatch))
    assert {"forge", "gateway"} <= set(rig.forwards) and rig.jump


def test_backoff_doubles_to_the_cap_and_resets_after_a_stable_run():
    assert next_delay(0, 0.1) == FIRST
    assert [d := next_delay(FIRST, 0.1), next_delay(d, 0.1), next_delay(4.0, 0.1)] == [1.0, 2.0, MAX]
    assert next_delay(MAX, 0.1) == MAX
    assert next_delay(MAX, STABLE) == FIRST


def test_checks_judge_http_answers():
    assert check.judge("forge", 401) and check.judge("forge", 200) and check.judge("forge", 404)
    assert not check.judge("forge", 502)
    assert check.judge("gateway", 200) and not check.judge("gateway", 401)


def test_crontab_table_replaces_only_the_tagged_line():
    tag = "# nev-rig-forward /a/rig.local.json"
    line = f"@reboot cd /a && env X=1 python -m rig.cli rig forward up >> /l 2>&1 {tag}"
    theirs = "@reboot other # nev-rig-forward /a/rig.local.json2\n"
    base = "0 3 * * * backup # mine\n" + theirs
    t1 = crontab.table(base, tag, line)
    assert t1 == base + line + "\n"
    assert crontab.table(t1, tag, line) == t1
    assert crontab.table(t1, tag, None) == base
    assert crontab.table("", tag, None) == ""
    with pytest.raises(ValueError):
        crontab.table(base, tag, "@reboot untagged")


def test_crontab_line_escapes_percent_and_quotes():
    ln = crontab.line("@reboot", Path("/r o"), {"NEV_X": "a%b c"}, ["py", "-m", "x"], Path("/l"), "# t")
    assert ln == "@reboot mkdir -p / && cd '/r o' && env NEV_X='a\\%b c' py -m x >> /l 2>&1 # t"


def test_client_argv_pins_the_host_key_binds_loopback_and_holds_no_secret():
    from lanes.base.openssh import client_forward_argv
    from lanes.base.ssh import Target

    argv = client_forward_argv(Target("jump-host", "root", 2222), 18080, "10.0.0.5:80",
                               Path("/k/known hosts"), Path("/k/id"))
    assert argv[:6] == ["ssh", "-N", "-F", "none", "-L", "127.0.0.1:18080:10.0.0.5:80"]
    opts = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    for want in ("BatchMode yes", "StrictHostKeyChecking yes", 'UserKnownHostsFile "/k/known hosts"',
                 "GlobalKnownHostsFile /dev/null", "IdentitiesOnly yes", "ExitOnForwardFailure yes",
                 "ServerAliveInterval 5", "ServerAliveCountMax 2", "KexAlgorithms curve25519-sha256"):
        assert want in opts
    assert not [o for o in opts if o.startswith("StrictHostKeyChecking") and o != "StrictHostKeyChecking yes"]
    assert argv[-5:] == ["-i", "/k/id", "-p", "2222", "root@jump-host"]


def test_client_failures_are_classified_from_what_ssh_said():
    from lanes.base.openssh import client_failure
    from lanes.base.ssh import Target

    j, kh = Target("jump-host", "root"), Path("/kh")
    unknown = client_failure("No ED25519 host key is known for jump-host\nHost key verification failed.", j, kh)
    assert unknown.kind == "host-key" and "not pinned in /kh" in unknown.line and unknown.lasting
    assert "the jump host root@jump-host" in unknown.line
    changed = client_failure("@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@\n"
                             "Host key verification failed.", j, kh)
    assert changed.kind == "host-key" and "does not match" in changed.line
    assert client_failure("root@jump-host: Permission denied (publickey).", j, kh).kind == "login"
    port = client_failure("bind [127.0.0.1]:18080: Address already in use\n"
                          "Could not request local forwarding.", j, kh)
    assert port.kind == "port" and port.lasting
    refused = client_failure("ssh: connect to host jump-host port 22: Connection refused", j, kh)
    assert refused.kind == "refused" and "connection refused" in refused.line
    assert not refused.lasting
    unresolved = client_failure("ssh: Could not resolve hostname jump-host: Name or service "
                                "not known", j, kh)
    assert unresolved.kind == "resolve" and unresolved.lasting    # a failed `up` waits for nothing
    other = client_failure("something new", j, kh)
    assert other.kind == "other" and "something new" in other.line and not other.lasting
    masked = client_failure("GET http://u:tok3n-secret@h/ failed", j, kh).line
    assert "(GET http://***@h/ failed)" in masked and "tok3n" not in masked
