"""`nev lane create|destroy`: the lxc backend for real on this machine, pct against recorded files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from lanes import create as cr
from lanes import create_lxc as crl
from lanes import create_pct as crp
from lanes.base.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).with_name("golden")


# A machine of the rig network, for LXC: its network namespace, a sysfs of that namespace (LXC
# finds the bridge there) with this machine's cgroup tree kept in it (lxc-start needs it; `ip
# netns exec` mounts a sysfs without it).
ON_RIG = """set -e
mkdir -p /run/nev-cgroup-keep
mount --rbind /sys/fs/cgroup /run/nev-cgroup-keep
mount -t sysfs sysfs /sys
mount --move /run/nev-cgroup-keep /sys/fs/cgroup
exec "$@"
"""


def nev(*args: str, netns: str | None = None, **kw) -> subprocess.CompletedProcess:
    """nev here, or (`netns`) on a machine of the rig network: the box's LXC node is one."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    where = (["nsenter", f"--net=/run/netns/{netns}", "--", "unshare", "--mount", "--propagation", "private",
              "sh", "-c", ON_RIG, "on-rig"] if netns else [])
    return subprocess.run([*where, sys.executable, "-m", "rig.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, **kw)


def bridge_ports(box) -> list[str]:
    out = subprocess.run(["ip", "-n", box.rig_netns, "-o", "link", "show", "master", box.bridge],
                         capture_output=True, text=True).stdout
    return sorted(ln.split(":")[1].strip().split("@")[0] for ln in out.splitlines())


def test_lxc_config_is_unprivileged_overlay_started_at_boot():
    lane = crl.LxcLane(name="lane0", bridge="br0", addr="10.0.0.11", cpus=96, memory_gb=96,
                      binds=(cr.Bind("/srv/nas/lanes", "/srv/lane-shared"),))
    cfg = crl.lxc_config(lane)
    img = crl.ImageRecipe().rootfs()
    assert f"lxc.rootfs.path = overlay:{img}:/var/lib/lxc/lane0/delta" in cfg
    assert "lxc.rootfs.options = userxattr" in cfg
    assert "lxc.idmap = u 0 100000 65536" in cfg and "lxc.idmap = g 0 100000 65536" in cfg
    # the guest boots its own init (systemd, from the image) with PTYs, as a real lane does
    assert "lxc.init.cmd = /sbin/init" in cfg.splitlines() and "lxc.signal.halt = SIGRTMIN+3" in cfg
    assert "lxc.pty.max = 64" in cfg and "lxc.tty.max = 0" in cfg
    assert "script.up" not in cfg and "hook.start-host" not in cfg
    assert "lxc.start.auto = 1" in cfg
    assert "lxc.cgroup2.cpu.max = 9600000 100000" in cfg and "lxc.cgroup2.memory.max = 96G" in cfg
    assert "lxc.net.0.ipv4.address = 10.0.0.11/24" in cfg and "lxc.net.0.link = br0" in cfg
    assert "lxc.mount.entry = /srv/nas/lanes srv/lane-shared none bind,create=dir 0 0" in cfg
    assert "ipv4.gateway" not in cfg


def test_lxc_config_names_the_hooks_a_box_lane_needs_at_every_boot():
    lane = crl.LxcLane(name="lane0", bridge="", addr="10.0.0.11", net_up="/b/lane0.hooks/net-up",
                      start_host="/b/lane0.hooks/start-host")
    cfg = crl.lxc_config(lane).splitlines()
    assert "lxc.net.0.script.up = /b/lane0.hooks/net-up" in cfg
    assert "lxc.hook.start-host = /b/lane0.hooks/start-host" in cfg
    assert not any(x.startswith("lxc.net.0.link") for x in cfg)
    with pytest.raises(ConfigError, match="absolute"):
        crl.lxc_config(crl.LxcLane(name="lane0", bridge="", addr="10.0.0.11", net_up="hooks/net-up"))


def test_the_image_boots_systemd_with_cron_and_carries_rsync():
    r = crl.ImageRecipe()
    assert "systemd-sysv" in r.packages and "cron" in r.packages and "rsync" in r.packages
    script = crl.image_script(r)
    assert 'ln -sf /dev/null "$B/raw/etc/systemd/system/console-getty.service"' in script
    assert "init.lxc" not in script and "lane-init" not in script


BUSY = [(22, "cargo")]


@pytest.mark.parametrize("old, new, running, procs, want", [
    (None, "a", False, [], crl.Apply.WRITE),           # a new lane
    ("a", "b", False, BUSY, crl.Apply.WRITE),          # stopped: written, started with it
    ("a", "a", True, BUSY, crl.Apply.WRITE),           # unchanged: nothing to restart for
    ("a", "b", True, [], crl.Apply.RESTART),           # changed and idle: restarted
    ("a", "b", True, BUSY, crl.Apply.REFUSE_BUSY),     # changed and busy: nothing changed
])
def test_a_changed_config_restarts_a_running_lane_only_when_it_is_not_busy(old, new, running, procs, want):
    assert crl.decide_apply(old, new, running, procs) is want


def test_the_busy_test_reads_the_guests_processes_and_the_lanes_state():
    from lanes import busy

    lane = crl.LxcLane(name="lane0", bridge="br0", addr="10.0.0.2", lxcpath="/var/lib/lxc")
    assert crl.guest_ps_script(lane) == "lxc-attach -P /var/lib/lxc -n lane0 -- ps -eo pid=,comm=\n"
    ps = "    1 systemd\n  310 sshd\n  411 cargo\n  412 rustc\n  500 node-gyp\n"
    assert busy.busy_processes(ps, busy.pattern({})) == [(411, "cargo"), (412, "rustc")]
    cfg = crl.lxc_config(lane)
    assert crl.parse_current(f"state: RUNNING\n{cfg}") == (cfg, True)
    assert crl.parse_current(f"state: STOPPED\n{cfg}") == (cfg, False)
    assert crl.parse_current("state: none\n") == (None, False)
    restart = crl.start_script(lane, restart=True)
    assert restart.index("lxc-stop -P /var/lib/lxc -n lane0 -t 60") < restart.index("lxc-start")
    assert "lxc-stop" not in crl.start_script(lane)


def test_relative_lxcpath_is_refused():
    with pytest.raises(ConfigError, match="absolute"):
        crl.LxcLane(name="lane0", bridge="br0", addr="10.0.0.11", lxcpath="lxc")
    with pytest.raises(ConfigError, match="absolute"):
        crl.destroy_script("lane0", "var/lib/lxc")


def test_image_key_changes_with_the_recipe_so_a_used_image_is_never_rebuilt_in_place():
    a, b = crl.ImageRecipe(), crl.ImageRecipe(packages=(*crl.PACKAGES, "nodejs"))
    assert a.key != b.key and a.rootfs() != b.rootfs()
    assert a.key == crl.ImageRecipe().key
    script = crl.image_script(a)
    # built beside the image and renamed into place; a cached image is left alone
    assert f'if [ -d {a.rootfs()} ]; then echo "unchanged: image {a.key}"; exit 0; fi' in script
    assert f"mv \"$B/shifted\" {a.rootfs()}" in script


def test_secrets_of_a_new_lane_travel_on_stdin_not_argv():
    files = crl.GuestFiles(host_key="-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n", host_key_pub="ssh-ed25519 AAA x",
                          authorized_keys="ssh-ed25519 BBB c\n", sshd_config="x\n")
    lane = crl.LxcLane(name="lane0", bridge="br0", addr="10.0.0.11")
    script = crl.create_script(lane, files)
    assert "secret" in script          # the script is sent as `sh -s` on stdin
    from lanes import hostexec
    assert hostexec.COMMAND == "sh -s"


def pct_lane() -> crp.PctLane:
    return crp.PctLane(vmid=201, name="lane0", addr="10.20.0.11", gateway="10.20.0.1",
                      binds=(cr.Bind("/mnt/pve/nas/lane-shared", "/srv/lane-shared"),))


def test_pct_create_command_lines_match_the_recorded_file():
    got = "\n".join(crp.pct_create_commands(pct_lane())) + "\n"
    assert got == (GOLDEN / "pct_create.txt").read_text()


def test_pct_destroy_command_lines_match_the_recorded_file():
    got = "\n".join(crp.pct_destroy_commands(201)) + "\n"
    assert got == (GOLDEN / "pct_destroy.txt").read_text()


def test_cli_pct_dry_run_gives_the_recorded_command_lines(tmp_path):
    pub = tmp_path / "k.pub"
    pub.write_text("ssh-ed25519 AAAA test\n")
    cp = nev("lane", "create", "--backend", "pct", "--dry-run", "--vmid", "201", "--name", "lane0",
             "--addr", "10.20.0.11", "--gateway", "10.20.0.1", "--shared", "/mnt/pve/nas/lane-shared",
             "--authorized-key", str(pub))
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == (GOLDEN / "pct_create.txt").read_text()
    for spelling in ("--dry-run", "--print"):       # --print: the old spelling, hidden, still taken
        cp = nev("lane", "destroy", "--backend", "pct", spelling, "--vmid", "201")
        assert cp.returncode == 0 and cp.stdout == (GOLDEN / "pct_destroy.txt").read_text()


def test_cli_lxc_without_bridge_is_a_usage_error(tmp_path):
    pub = tmp_path / "k.pub"
    pub.write_text("ssh-ed25519 AAAA test\n")
    cp = nev("lane", "create", "--backend", "lxc", "--name", "lane0", "--addr", "10.0.0.1", "--authorized-key", str(pub))
    assert cp.returncode == 2 and "--bridge" in cp.stderr


def test_lxc_lane_created_by_nev_answers_ssh_passes_a_gate_and_is_gone_after_destroy(box, tmp_path):
    key = box.ssh_key       # one client key for both hops: the jump host knows it
    # Everything the guest's root must reach lives outside mode-700 folders (tmp_path, /root).
    base = Path("/var/lib/nev-lxc/tests") / uuid.uuid4().hex[:8]
    nas = base / "nas"
    nas.mkdir(parents=True)
    os.chmod(nas, 0o1777)
    lxcpath = str(base / "lxc")
    name = "nevtest-lxc0"
    addr = f"{box.net}.70"
    out = tmp_path / "record"
    ports_before = bridge_ports(box)
    # The node's image cache is filled from this machine's package mirror (a node of the real rig
    # has its own way to packages; the rig network here has none): built once, cached after.
    from lanes.hostexec import Node
    crl.ensure_image(Node("local"), crl.ImageRecipe())
    # The node the guest is made on sits on the rig network (its bridge is the rig's bridge); the
    # dev box reaches the guest through the jump host, as every lane.
    cp = nev("lane", "create", "--backend", "lxc", "--name", name, "--bridge", box.bridge, "--addr", addr,
             "--cpus", "2", "--memory-gb", "2", "--lxcpath", lxcpath, "--shared", str(nas),
             "--authorized-key", str(key.with_suffix(".pub")), "--out", str(out), netns=box.rig_netns)
    kh = tmp_path / "known_hosts"    # the new guest's pinned key, and the jump host's
    try:
        assert cp.returncode == 0, cp.stderr
        assert f"changed: lane {name} written in {lxcpath}" in cp.stdout
        kh.write_text((out / "known_hosts").read_text() + "".join(
            ln + "\n" for ln in box.known_hosts.read_text().splitlines() if ln.startswith(box.jump_addr + " ")))
        from tests.test_lane_lxc import connect
        conn = connect(f"lane@{addr}", kh, key, jump=box.jump)
        res = conn.run("id -un && cd /srv/lane && git init -q gate && cd gate && git -c user.email=a@b -c user.name=a "
                       "commit -q --allow-empty -m one && git rev-list --count HEAD && python3 -c 'print(6*7)' "
                       "&& touch /srv/lane-shared/from-lxc && cat /proc/self/uid_map")
        conn.close()
        assert res.exit_status == 0, res.err
        lines = res.out.split("\n")
        assert lines[:3] == ["lane", "1", "42"]
        assert "100000" in lines[3]                      # unprivileged: uid 0 is 100000 outside
        assert (nas / "from-lxc").stat().st_uid == 101000
        # a real gate (`nev lane run`, as in the lane-gate tests) passes on the new guest
        import json

        from tests.helpers import lane_helpers as h
        from tests.helpers import lane_rig as rigs
        rig = rigs.on_box(box, tmp_path / "rig")
        lanes = json.loads(Path(rig.env["NEV_LANES_FILE"]).read_text())
        lanes["lanes"] = [{"ssh": f"lane@{addr}", "root": "/srv/lane", "shared": "/srv/lane-shared", "name": name}]
        (tmp_path / "lanes.json").write_text(json.dumps(lanes))
        env = dict(rig.env, NEV_LANES_FILE=str(tmp_path / "lanes.json"), NEV_KNOWN_HOSTS=str(kh),
                   NEV_SSH_KEY=str(key))
        wt = h.clone_worktree(rig.clone_url, tmp_path / f"lxcgate{rig.tag}", rig.push_env)
        (wt / "untracked.txt").write_text("from the dev box\n")
        g = h.nev(["lane", "run", str(wt), "sh", "-c", "git rev-parse HEAD && cat untracked.txt && id -un"], env, cwd=wt)
        assert g.returncode == 0, g.stderr
        assert g.stdout.split() == [h.git(wt, "rev-parse", "HEAD").strip(), "from", "the", "dev", "box", "lane"]
        # a second create changes nothing
        cp2 = nev("lane", "create", "--backend", "lxc", "--name", name, "--bridge", box.bridge, "--addr", addr,
                  "--cpus", "2", "--memory-gb", "2", "--lxcpath", lxcpath, "--shared", str(nas),
                  "--authorized-key", str(key.with_suffix(".pub")), "--out", str(out), netns=box.rig_netns)
        assert cp2.returncode == 0, cp2.stderr
        assert not any(ln.startswith("changed:") for ln in cp2.stdout.splitlines())
        assert f"unchanged: lane {name} running" in cp2.stdout
        # a changed config (one more bind: bench/lane-nas.sh's case) needs a restart, refused
        # while the guest is busy (a process named in LANE_BUSY_COMMANDS), done once it is idle
        extra = base / "extra"
        extra.mkdir()
        (extra / "marker").write_text("bound\n")
        # the guest's monitor runs where create ran (the rig namespace): its command socket is there
        attach = ["ip", "netns", "exec", box.rig_netns,
                  "lxc-attach", "-P", lxcpath, "-n", name, "--"]
        pid = subprocess.run([*attach, "sh", "-c", "cp /bin/sleep /tmp/cargo && "
                              "(/tmp/cargo 300 >/dev/null 2>&1 & echo $!)"],
                             capture_output=True, text=True, check=True).stdout.strip()
        config = Path(lxcpath, name, "config").read_text()
        again = ["lane", "create", "--backend", "lxc", "--name", name, "--bridge", box.bridge, "--addr", addr,
                 "--cpus", "2", "--memory-gb", "2", "--lxcpath", lxcpath, "--shared", str(nas),
                 "--bind", f"{extra}:/srv/extra:ro", "--authorized-key", str(key.with_suffix(".pub")),
                 "--out", str(out)]
        cp3 = nev(*again, netns=box.rig_netns)
        assert cp3.returncode == 3, cp3.stderr
        assert f"lane {name} is busy (cargo (pid {pid}))" in cp3.stderr and "nothing changed" in cp3.stderr
        assert Path(lxcpath, name, "config").read_text() == config
        subprocess.run([*attach, "kill", pid], check=True)
        cp4 = nev(*again, netns=box.rig_netns)
        assert cp4.returncode == 0, cp4.stderr
        assert f"changed: lane {name} stopped to apply its changed config" in cp4.stdout
        assert f"changed: lane {name} started" in cp4.stdout
        seen = subprocess.run([*attach, "cat", "/srv/extra/marker"], capture_output=True, text=True)
        assert seen.stdout == "bound\n", seen.stderr
    finally:
        cd = nev("lane", "destroy", "--backend", "lxc", "--name", name, "--lxcpath", lxcpath, netns=box.rig_netns)
        left = sorted(p.name for p in Path(lxcpath).iterdir()) if Path(lxcpath).exists() else []
        shutil.rmtree(base)
    assert cd.returncode == 0, cd.stderr
    assert f"changed: lane {name} destroyed" in cd.stdout
    assert left == []                       # nothing of the lane is left in its lxcpath
    ls = subprocess.run(["lxc-ls", "-P", lxcpath], capture_output=True, text=True)
    assert name not in ls.stdout
    from rig.box.netns import inside
    from rig.box.waits import port_open
    with inside(box.rig_netns):
        assert not port_open(addr, 22)
    assert bridge_ports(box) == ports_before
    assert not list(Path("/sys/fs/cgroup").glob(f"*/lxc.payload.{name}"))
