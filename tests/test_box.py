"""The rig-in-a-box: its network (the real rig's: one way in through the jump host), lanes (sshd in
namespaces) and the forge, against the real parts."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

from lanes.base import procs
from lanes.base.ssh import Connection, HostKeyError, SshError, Target
from rig.box import Box, state
from rig.box.forge import create_repo
from rig.box.netns import run_in

ROOT = Path(__file__).resolve().parent.parent


def ssh(info, lane, cmd, known_hosts=None):
    """OpenSSH as a user of the rig runs it: the box's client config, ProxyJump through the jump
    host, every key pinned (`known_hosts` replaces the lane hop's pins only)."""
    return subprocess.run(
        ["ssh", "-F", str(info.ssh_config), "-o", "ConnectTimeout=5",
         *(["-o", f"UserKnownHostsFile={known_hosts}"] if known_hosts else []), f"lane@{lane.addr}", cmd],
        capture_output=True, text=True, timeout=30)


def jump(info):
    return Target.parse(info.jump)


def forge_local(info, path="engine.git"):
    """The forge through the development box's forward (the only way it reaches the forge)."""
    return info.forge_local_url + path


def nev(*args, env=None):
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=120)


def git(*args, env=None, cwd=None):
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd, timeout=60,
                          env={**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})})


# ---- lanes ------------------------------------------------------------------------------------


def test_ssh_batchmode_with_pinned_keys_reaches_each_lane(box):
    assert len(box.lanes) == 2
    for lane in box.lanes:
        r = ssh(box, lane, "id -un; ip -4 -o addr show dev eth0")
        assert r.returncode == 0, r.stderr
        user, addr_line = r.stdout.splitlines()
        assert user == "lane"
        assert f" {lane.addr}/24 " in addr_line


def test_lanes_ssh_module_connects_through_the_jump_host_with_the_box_known_hosts(box):
    lane = box.lanes[1]
    with Connection(Target.parse(lane.ssh), known_hosts=box.known_hosts, key_file=box.ssh_key, jump=jump(box)) as c:
        r = c.run("echo $HOME; stat -c %U /srv/lane; echo $SSH_CLIENT")
    home, owner, client = r.out.split()[:3]
    assert (home, owner) == ("/home/lane", "lane")
    assert client == box.jump_rig_addr          # the lane sees the jump host, not the dev box


# ---- the network: two networks, one way in ------------------------------------------------------


def test_the_development_box_has_no_address_or_route_on_the_rig_network(box):
    addrs = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    mine = [ln for ln in addrs.splitlines() if f" {box.net}." in ln]
    assert len(mine) == 1 and f" {box.dev_addr}/30 " in mine[0], mine   # the outside link only
    assert not Path("/sys/class/net", box.bridge).exists()
    for host, h in [*box.hosts.items(), ("jump (rig side)", {"addr": box.jump_rig_addr})]:
        r = subprocess.run(["ip", "route", "get", h["addr"]], capture_output=True, text=True)
        assert r.returncode != 0 and "unreachable" in (r.stdout + r.stderr).lower() or             "No route" in r.stderr, (host, r.stdout, r.stderr)
    r = subprocess.run(["ip", "route", "get", box.jump_addr], capture_output=True, text=True)
    assert r.returncode == 0 and f"dev {box.name}-out" in r.stdout
    # Not only the routing table: no sshd banner ever comes back from a lane's address.
    for lane in box.lanes:
        banner = b""
        try:
            with socket.create_connection((lane.addr, 22), timeout=2) as sock:
                sock.settimeout(2)
                banner = sock.recv(64)
        except OSError:
            pass
        assert not banner.startswith(b"SSH-"), lane.addr


def test_a_lane_is_not_reached_without_the_jump_host(box):
    with pytest.raises(SshError):
        Connection(Target.parse(box.lanes[0].ssh), box.known_hosts, box.ssh_key, timeout=3).connect()


def test_an_unknown_jump_host_key_is_refused_like_a_lanes(box, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(ln + "\n" for ln in box.known_hosts.read_text().splitlines()
                          if not ln.startswith(box.jump_addr + " ")))
    with pytest.raises(HostKeyError, match="jump host"):
        Connection(Target.parse(box.lanes[0].ssh), kh, box.ssh_key, jump=jump(box)).connect()
    # the same through nev: the lane does not answer, and the reason names the pin
    r = nev("lane", "list", "--json", env={**box.env, "NEV_KNOWN_HOSTS": str(kh)})
    assert r.returncode == 3, r.stderr      # no lane answered: cannot reach the rig
    assert '"answers": false' in r.stdout and '"cause": "not-pinned"' in r.stdout
    r = nev("lane", "run", "--lane", "0", str(ROOT), "true", env={**box.env, "NEV_KNOWN_HOSTS": str(kh)})
    assert r.returncode == 3 and "jump host" in r.stderr and "not pinned" in r.stderr


def test_the_jump_host_gives_no_shell_and_forwards_only_to_rig_hosts(box):
    with Connection(jump(box), box.known_hosts, box.ssh_key) as j:
        r = j.run("id -un; echo reached")
        assert r.exit_status != 0 and "reached" not in r.out
        ch = j.transport.open_channel("direct-tcpip", (box.lanes[0].addr, 22), ("127.0.0.1", 0), timeout=5)
        try:
            assert ch.recv(4) == b"SSH-"
        finally:
            ch.close()
        for where in (("127.0.0.1", 22), (box.dev_addr, 22)):
            with pytest.raises(paramiko.ChannelException):
                j.transport.open_channel("direct-tcpip", where, ("127.0.0.1", 0), timeout=5)
    r = subprocess.run(["ssh", "-F", str(box.ssh_config), "-o", "ConnectTimeout=5", f"{box.name}-jump", "id"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "uid=" not in r.stdout


def test_a_wrong_pinned_host_key_is_refused(box, tmp_path):
    other = box.lanes[1]
    bad = tmp_path / "known_hosts"
    # lane0's address with lane1's key: the pin does not match.
    line1 = next(ln for ln in box.known_hosts.read_text().splitlines() if ln.startswith(other.addr + " "))
    bad.write_text(line1.replace(other.addr, box.lanes[0].addr, 1) + "\n")
    # the jump host stays pinned: only the lane's pin is wrong
    bad.write_text(bad.read_text() + next(ln for ln in box.known_hosts.read_text().splitlines()
                                          if ln.startswith(box.jump_addr + " ")) + "\n")
    r = ssh(box, box.lanes[0], "true", known_hosts=bad)
    assert r.returncode == 255 and "host key" in r.stderr.lower()
    try:
        Connection(Target.parse(box.lanes[0].ssh), known_hosts=bad, key_file=box.ssh_key, jump=jump(box)).connect()
        raise AssertionError("connected despite a wrong pinned key")
    except HostKeyError:
        pass


def test_password_login_is_refused(box):
    r = subprocess.run(["ssh", "-F", str(box.ssh_config), "-o", "PubkeyAuthentication=no",
                        f"lane@{box.lanes[0].addr}", "true"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 255 and "Permission denied (publickey)" in r.stderr


def test_each_lane_has_its_own_srv_lane_and_home_but_shares_the_nas(box):
    l0, l1 = box.lanes
    assert ssh(box, l0, "echo zero > /srv/lane/mark-0 && echo h0 > ~/home-mark && "
                        "echo shared > /srv/lane-shared/from-lane0").returncode == 0
    assert (l0.host_root / "mark-0").read_text() == "zero\n"
    assert (l0.host_home / "home-mark").read_text() == "h0\n"
    r = ssh(box, l1, "ls -A /srv/lane; ls -A ~; cat /srv/lane-shared/from-lane0; ls /srv")
    assert r.returncode == 0, r.stderr
    assert "mark-0" not in r.stdout and "home-mark" not in r.stdout
    assert "shared" in r.stdout
    assert sorted(r.stdout.split()[-3:]) == ["lane", "lane-shared", "toolchain"]  # nothing else under /srv
    assert (box.nas / "from-lane0").read_text() == "shared\n"


def test_nas_standard_folders_stay_writable_for_lanes_after_root_writes_there(box):
    # The dev box (root) writes into the share first, as an in-place batch or a test does.
    (box.nas / "ledger" / "from-lane.jsonl").unlink(missing_ok=True)     # a kept box's last run
    (box.nas / "ledger" / "from-root.jsonl").write_text("{}\n")
    (box.nas / "archive" / "job-logs" / "root-job").mkdir(exist_ok=True)
    r = ssh(box, box.lanes[1], "echo '{}' >> /srv/lane-shared/ledger/from-lane.jsonl && "
                               "mkdir -p /srv/lane-shared/archive/job-logs/lane-job && "
                               "mkdir -p /srv/lane-shared/archive/gate-logs/wt")
    assert r.returncode == 0, r.stderr
    assert (box.nas / "ledger" / "from-lane.jsonl").read_text() == "{}\n"


def test_lanes_get_the_hosts_rust_toolchain_read_only(box):
    r = ssh(box, box.lanes[0], "rustc --version && cargo --version && touch /srv/toolchain/rustup/x")
    assert "rustc " in r.stdout and "cargo " in r.stdout, r.stderr
    assert r.returncode != 0 and "Read-only file system" in r.stderr


def test_run_in_a_lane_sees_the_lane_mounts(box):
    (box.lanes[0].host_root / "via-run-in").write_text("x")
    r = run_in(box, "lane0", ["ls", "/srv/lane"])
    assert r.returncode == 0 and "via-run-in" in r.stdout.split()
    r = run_in(box, "forge", ["ip", "-4", "-o", "addr", "show", "dev", "eth0"])
    assert f" {box.forge_addr}/24 " in r.stdout


# ---- forge ------------------------------------------------------------------------------------


def test_clone_with_the_token_works(box, tmp_path):
    r = git("clone", forge_local(box).replace("http://", f"http://{box.forge_user}@"),
            str(tmp_path / "c"), env={"GIT_ASKPASS": str(box.forge_askpass)})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "c" / "README.md").exists()
    assert f" {box.forge_user} [" in box.forge_access_log.read_text()


def test_clone_without_the_token_gets_401(box, tmp_path):
    before = box.forge_access_log.read_text().count('" 401 ')
    r = git("clone", forge_local(box), str(tmp_path / "c"))
    assert r.returncode != 0 and not (tmp_path / "c").exists()
    assert box.forge_access_log.read_text().count('" 401 ') > before


def test_clone_with_a_wrong_token_gets_401(box, tmp_path):
    ask = tmp_path / "ask"
    ask.write_text("#!/bin/sh\necho not-the-token\n")
    ask.chmod(0o700)
    r = git("clone", forge_local(box).replace("http://", "http://nev@"), str(tmp_path / "c"),
            env={"GIT_ASKPASS": str(ask)})
    assert r.returncode != 0 and "Authentication failed" in r.stderr


def test_forge_create_repo_then_push_and_clone_back(box, tmp_path):
    name = f"scratch-push-{secrets.token_hex(4)}"    # new on every run: a kept box still has earlier runs' repos
    url = create_repo(box, name)
    assert url == box.forge_url + f"{name}.git"
    work = tmp_path / "w"
    assert git("init", "-q", "-b", "main", str(work)).returncode == 0
    (work / "f.txt").write_text("pushed\n")
    env = {"GIT_ASKPASS": str(box.forge_askpass), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    assert git("add", "f.txt", cwd=work).returncode == 0
    assert git("commit", "-q", "-m", "one", cwd=work, env=env).returncode == 0
    authed = box.dev_url(url).replace("http://", "http://nev@")
    assert authed.startswith("http://nev@127.0.0.1:")
    r = git("push", authed, "main", cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    r = git("clone", authed, str(tmp_path / "back"), env=env)
    assert r.returncode == 0 and (tmp_path / "back" / "f.txt").read_text() == "pushed\n"


def test_a_lane_clones_from_the_forge_over_the_bridge(box):
    # Lanes reach the forge by its bridge address; the token file is copied in by the test only.
    lane = box.lanes[0]
    tok = box.forge_token_file.read_text().strip()
    (lane.host_home / ".forge-token").write_text(tok + "\n")
    os.chown(lane.host_home / ".forge-token", *(lambda s: (s.st_uid, s.st_gid))(lane.host_home.stat()))
    ask = "printf '#!/bin/sh\\ncase \"$1\" in Username*) echo nev;; *) cat ~/.forge-token;; esac\\n' > ~/ask; chmod 700 ~/ask"
    r = ssh(box, lane, f"{ask} && rm -rf /srv/lane/eng && GIT_ASKPASS=~/ask git clone -q "
                       f"http://nev@{box.forge_addr}/git/engine.git /srv/lane/eng && ls /srv/lane/eng")
    assert r.returncode == 0, r.stderr
    assert "README.md" in r.stdout


def test_the_token_is_in_no_recorded_file_or_env(box):
    tok = box.forge_token_file.read_text().strip()
    assert oct(box.forge_token_file.stat().st_mode & 0o777) == "0o600"
    assert tok not in (box.dir / "box.json").read_text()
    assert tok not in (box.dir / "forge" / "nginx.conf").read_text()
    assert tok not in (box.dir / "forge" / "htpasswd").read_text()
    assert all(tok not in v for v in box.env.values())
    assert tok not in nev("box", "env", env=box.env).stdout


# ---- isolation --------------------------------------------------------------------------------


def test_no_namespace_has_a_default_route(box):
    from rig.box import netns

    for host, h in box.hosts.items():
        assert netns.default_routes(h["netns"]) == [], host
    assert netns.default_routes(f"{box.name}-jump") == []
    assert netns.default_routes(box.rig_netns) == []


def test_every_server_binds_its_namespace_address_or_loopback(box):
    checked = 0
    jump_host = {"netns": f"{box.name}-jump", "addr": box.jump_rig_addr, "also": box.jump_addr}
    for host, h in [*box.hosts.items(), ("jump", jump_host)]:
        r = subprocess.run(["ip", "netns", "exec", h["netns"], "ss", "-Hltun"], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            local = line.split()[4]
            addr, port = local.rsplit(":", 1)
            addr = addr.strip("[]")
            if line.startswith("udp") and port == "5353":
                continue   # mDNS (the host's advertiser) must bind the wildcard to hear multicast;
                #            it joins the group on the host's own address only
            assert addr in (h["addr"], h.get("also"), "127.0.0.1", "::1"), (host, line)
            checked += 1
    assert checked >= 3


# ---- up, repair, status, env ------------------------------------------------------------------


def test_second_up_is_a_no_op(box):
    b = Box(box.name, box.net, box.dir)
    r = b.bring_up(len(box.lanes))
    assert r.changed == []
    out = nev("box", "up", env=box.env)
    assert out.returncode == 0 and "already up; nothing changed" in out.stderr


def test_up_repairs_a_half_alive_box(box):
    b = Box(box.name, box.net, box.dir)
    st = b.state()
    assert st is not None
    rec = st.procs["lane1.sshd"]
    procs.stop(rec)
    # an LXC lane's veth goes with its guest; a netns lane's stays and is deleted here
    subprocess.run(["ip", "-n", box.rig_netns, "link", "del", f"{box.name}-lane1"],
                   check=st.lanes_kind == "netns", capture_output=True)
    assert nev("box", "status", env=box.env).returncode == 1
    r = b.bring_up(len(box.lanes))
    assert "started lane1.sshd" in r.changed
    assert any("veth" in c and "lane1" in c for c in r.changed)
    assert ssh(box, box.lanes[1], "true").returncode == 0
    assert nev("box", "status", env=box.env).returncode == 0


def test_status_lists_every_host_and_service_with_addresses(box):
    r = nev("box", "status", env=box.env)
    assert r.returncode == 0, r.stdout + r.stderr
    for host, h in box.hosts.items():
        assert any(line.startswith(host) and h["addr"] in line for line in r.stdout.splitlines())
    assert "sshd" in r.stdout and "nginx" in r.stdout


def test_env_prints_exports_that_point_at_the_box(box):
    r = nev("box", "env", env=box.env)
    assert r.returncode == 0
    lines = dict(ln.removeprefix("export ").split("=", 1) for ln in r.stdout.splitlines())
    assert lines["NEV_LANES_FILE"] == str(box.lanes_file)
    assert lines["NEV_KNOWN_HOSTS"] == str(box.known_hosts)
    assert lines["NEV_LANE_GIT_URL"] == box.forge_url + "engine.git"      # the lanes: rig address
    assert lines["NEV_FORGE_URL"] == box.forge_local_url + "engine.git"   # the dev box: its forward
    assert lines["NEV_MODEL_URL"].startswith("http://127.0.0.1:")         # the dev box: its forward
    assert lines["NEV_LANE_MODEL_URL"] == box.gateway_url                 # the lanes: rig address
    assert lines["NEV_LANE_JUMP"] == f"nevjump@{box.jump_addr}"
    from lanes.lanesfile import load

    lf = load(box.lanes_file)
    assert [ln.ssh for ln in lf.lanes] == [ln.ssh for ln in box.lanes]
    assert lf.jump == box.jump and all(ln.jump == box.jump for ln in lf.lanes)


def test_box_env_fixture_points_settings_at_the_box(box_env):
    from lanes import lanesfile

    assert lanesfile.configured().lanes[0].target.host == box_env.lanes[0].addr


def test_up_without_root_exits_1_saying_it_needs_root(tmp_path):
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        sys.executable, "-m", "rig.cli", "box", "up"], capture_output=True, text=True,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
    assert r.returncode == 1
    assert "needs root on Debian" in r.stderr


# ---- a throwaway second box: coexistence and down ---------------------------------------------


def test_a_second_box_coexists_and_down_leaves_nothing_behind(box, tmp_path):
    name = (box.name[:5] + "z")
    net = "198.19." + box.net.split(".")[2]
    env = {"NEV_BOX_NAME": name, "NEV_BOX_NET": net, "NEV_BOX_DIR": str(tmp_path)}
    t0 = time.monotonic()
    r = nev("box", "up", "--lanes", "1", env=env)
    assert r.returncode == 0, r.stderr
    assert "is up" in r.stderr and " s" in r.stderr
    st = state.read_state(tmp_path / name)
    assert st is not None and st.info is not None
    pids = [p.pid for p in st.procs.values()]
    assert pids and all(procs.alive(p) for p in st.procs.values())
    # The session box still answers next to it.
    assert ssh(box, box.lanes[0], "true").returncode == 0
    # Half-alive: every process of it dies first (as when a session ends), the kernel objects
    # stay; `down` must still clean everything.
    for rec in st.procs.values():
        procs.stop(rec)
    assert [n for n in os.listdir("/run/netns") if n.startswith(name + "-")]
    r = nev("box", "down", env=env)
    assert r.returncode == 0, r.stderr
    assert not [n for n in os.listdir("/run/netns") if n.startswith(name + "-")]
    assert not [n for n in os.listdir("/sys/class/net") if n.startswith(name)]
    assert net not in subprocess.run(["ip", "route", "show", "table", "all"], capture_output=True,
                                     text=True).stdout              # the unreachable route went too
    assert not any(Path(f"/proc/{p}").exists() and procs.start_time(p) for p in pids)
    assert not (tmp_path / name).exists()
    assert name not in state.registry_entries()
    # The shared user stays: the session box still lists it.
    assert subprocess.run(["id", "lane"], capture_output=True).returncode == 0
    assert time.monotonic() - t0 < 60
    # A second down is harmless.
    assert nev("box", "down", env=env).returncode == 0


def test_a_box_name_in_use_by_another_folder_is_refused(box, tmp_path):
    r = nev("box", "up", env={"NEV_BOX_NAME": box.name, "NEV_BOX_NET": "198.19.250",
                              "NEV_BOX_DIR": str(tmp_path)})
    assert r.returncode == 1 and "already used by the box in" in r.stderr
    r = nev("box", "down", env={"NEV_BOX_NAME": box.name, "NEV_BOX_DIR": str(tmp_path)})
    assert r.returncode == 1 and "nothing was removed" in r.stderr
    assert ssh(box, box.lanes[0], "true").returncode == 0


def test_shape_slows_a_lanes_upload_and_off_restores_it(box):
    def pull_seconds() -> float:
        t0 = time.monotonic()
        r = ssh(box, box.lanes[1], "head -c 150000 /dev/zero")
        assert r.returncode == 0 and len(r.stdout) == 150000
        return time.monotonic() - t0

    r = nev("box", "shape", "lane1", "--up", "600", "--down", "600", env=box.env)
    assert r.returncode == 0, r.stderr
    try:
        slow = pull_seconds()     # 150 KB at 600 kbit/s (75 KB/s) takes about 2 s
    finally:
        assert nev("box", "shape", "lane1", "off", env=box.env).returncode == 0
    fast = pull_seconds()
    assert slow >= 1.5 and fast < slow / 2, (slow, fast)
    r = nev("box", "shape", "forge", "--up", "100", env=box.env)
    assert r.returncode == 2 and "not a lane" in r.stderr


def test_env_and_status_of_a_box_that_is_not_up_say_so(tmp_path):
    # a registry of its own that lists no box: only then is `nev box up` the advice
    env = {"NEV_BOX_NAME": "nobox", "NEV_BOX_NET": "198.19.251", "NEV_BOX_DIR": str(tmp_path),
           "NEV_BOX_REGISTRY": str(tmp_path / "registry")}
    for cmd in ("env", "status"):
        r = nev("box", cmd, env=env)
        assert r.returncode == 1 and "box nobox is not up" in r.stderr and "nev box up" in r.stderr
        assert r.stdout == ""
    r = nev("box", "up", "--lanes", "0", env=env)
    assert r.returncode == 1 and "--lanes 0" in r.stderr
    r = nev("box", "up", env={**env, "NEV_BOX_NET": "10.1.2"})
    assert r.returncode == 1 and "198.18.0.0/15" in r.stderr
