"""One gate cannot touch another (issue 41), on the box's lane 0 with real sshd, git, bubblewrap
and forge: gate A plays the attacker with every trick a gate's command has, then gate B of
another repository (another clone: its own repository key, its own copy), a job's verify and a
landing run, and A gates again.
None of A's code runs outside A's own jail, B's `.env` reaches nothing of A's, no process of A's
outlives its gate, A's copy still gates, and the shared store, the mirror, the agent's cache and
the installs are as nev left them."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from lanes import agentpack
from lanes.agent import layout
from tests.helpers import lane_helpers as h
from tests.helpers import lane_rig as rigs

B_SECRET = "sk-gate-b-" + "5e1f0c93a7d2"


LANE_HOME = "/home/lane"      # the lane user's home as the lane sees it (`lanes.provision`)


@pytest.fixture(scope="module")
def lane_rig(box, tmp_path_factory):
    rig = rigs.on_box(box, tmp_path_factory.mktemp("jailrig"))
    rig.lane_root_on_lane = box.lanes[0].root      # type: ignore[attr-defined]
    yield rig
    rig.stop()


def _digest(path: Path) -> str:
    """The sha256 of every file under `path` (names and contents; links by their target), but
    compiled modules: nev's own runs of an install outside any gate (the lane's services) write
    them, and `nev lane install` drops them before it checks an install."""
    hsh = hashlib.sha256()
    for p in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if "__pycache__" in p.parts:
            continue
        hsh.update(str(p.relative_to(path) if path.is_dir() else p.name).encode())
        if p.is_symlink():
            hsh.update(os.readlink(p).encode())
        elif p.is_file():
            hsh.update(p.read_bytes())
    return hsh.hexdigest()


# Gate A's command: every trick, each line of its report `name ok|denied` (ok: the write took).
ATTACK = r"""
set -u
R=jail-report.txt; : > $R
try() {
  n=$1; shift
  if ( "$@" ) >/dev/null 2>&1; then echo "$n ok" >> $R; else echo "$n denied" >> $R; fi
}
ROOT=$(dirname "$PWD"); M=$ROOT/.git-mirror; S=$NEV_LANE_SHARED; H=$HOME
HOOK=$M/hooks/reference-transaction
try mirror-hook sh -c "printf '#!/bin/sh\nenv > $H/hook-ran\n' > $HOOK && chmod +x $HOOK"
try mirror-config sh -c "printf '[core]\n\tfsmonitor = touch $H/fsmon-ran\n' >> $M/config"
A=$H/.local/state/nev/agent
PLANT="open('$H/cache-ran','w')"
try agent-cache sh -c "for f in $A/*; do echo \"$PLANT\" > \$f; done; ls $A | grep -q ."
I=$H/.local/share/nev/installs
try install sh -c "f=\$(ls -d $I/*/lib/python*/site-packages/lanes/__init__.py | head -1);
                   test -n \"\$f\" && echo 'import os' >> \$f"
try ssh-keys ls $H/.ssh/authorized_keys
try other-copies sh -c "ls -a $ROOT | grep -v -x -e . -e .. -e .git-mirror -e ${PWD##*/} \
                        -e .payload-${PWD##*/} | grep -q ."
try other-archive sh -c "mkdir -p $S/archive/gate-logs/x && touch $S/archive/gate-logs/x/planted"
try corpus-digests sh -c "mkdir -p $S/corpus-digests/x && touch $S/corpus-digests/x/planted"
for d in corpora ground-truth suites; do
  try $d sh -c "mkdir -p $S/$d/x && touch $S/$d/x/planted"
done
LINE='{"models":{"a":{"gpu_s":1e308}}}'
try other-ledger sh -c "echo '$LINE' >> $S/ledger/someone-else.jsonl"
try own-ledger sh -c "test -w $NEV_LEDGER"
try own-copy touch own-file
try tmp sh -c "echo x > /tmp/scratch"
# a watcher that outlives the gate (setsid, double fork), waiting for another gate's .env
W='( while :; do for e in '"$ROOT"'/*/.env '"$ROOT"'/.payload-*/.env; do
       cat "$e" >> '"$PWD"'/stolen 2>/dev/null; done; sleep 0.2; done ) &'
setsid sh -c "$W" </dev/null >/dev/null 2>&1
echo "pid1 $(cat /proc/1/comm)" >> $R
"""


def _report(copy: Path) -> dict[str, str]:
    text = (copy / "jail-report.txt").read_text()
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


def test_gate_a_attacks_then_gate_b_a_verify_a_landing_and_a_again_run_untouched(
        lane_rig, box, tmp_path):
    from tests.test_land_lane import gated_on_lane, lane_kit

    rig = lane_rig
    home = rig.lane_home
    assert home is not None
    wt_a = h.clone_worktree(rig.clone_url, rig.tmp / f"atk{rig.tag}", rig.push_env)
    wt_b = h.clone_worktree(rig.clone_url, rig.tmp / f"victim{rig.tag}", rig.push_env)
    (wt_b / ".env").write_text(f"NEV_MODEL_KEY={B_SECRET}\n")
    agent = agentpack.lane_agent()
    # the store and the cache as nev left them (a warm gate first: the agent is cached)
    assert h.nev(["lane", "run", str(wt_b), "true"], rig.env).returncode == 0
    cache = home / layout.AGENT_CACHE / agent.hash
    installs = home / layout.NEV_INSTALLS
    before = {"cache": _digest(cache), "installs": _digest(installs)}

    # model-written code run with --sandbox points the copy's `.git` at a git folder of its own
    # (the mirror's objects borrowed) with an fsmonitor and a post-checkout hook
    redirect = (f"git init -q --bare evilgit && echo {rig.lane_root_on_lane}/.git-mirror/objects "
                "> evilgit/objects/info/alternates && git --git-dir=evilgit config core.fsmonitor "
                f"'touch {LANE_HOME}/sbx-fsmon-ran{rig.tag}' && printf '#!/bin/sh\ntouch "
                f"{LANE_HOME}/sbx-hook-ran{rig.tag}\n' > evilgit/hooks/post-checkout && "
                "chmod +x evilgit/hooks/post-checkout && cp .git/HEAD evilgit/ 2>/dev/null; "
                "printf 'gitdir: %s/evilgit\n' \"$PWD\" > .git && echo redirected")
    r = h.nev(["lane", "run", "--sandbox", str(wt_a), "sh", "-c", redirect], rig.env, timeout=300)
    assert r.returncode == 0 and "redirected" in r.stdout, r.stdout + r.stderr
    # a committed symlink out of the copy, to a folder in the lane home
    outward = home / f"outward{rig.tag}"
    outward.mkdir()
    os.chown(outward, home.stat().st_uid, home.stat().st_gid)
    (wt_a / "oracle").symlink_to(f"{LANE_HOME}/{outward.name}")
    h.git(wt_a, "add", "oracle")
    h.git(wt_a, "commit", "-qm", "an outward link")
    attack = ATTACK.replace("someone-else", f"someone-else{rig.tag}")
    attack = attack.replace("-ran", f"-ran{rig.tag}")
    r = h.nev(["lane", "run", str(wt_a), "sh", "-c", attack], rig.env)
    assert r.returncode == 0, r.stderr
    assert "rewritten to name its worktree entry" in r.stderr, r.stderr
    assert list(outward.iterdir()) == [], "the agent made something outside the copy"
    copy_a = rig.lane_root / h.copy_name(wt_a)
    got = _report(copy_a)
    assert got == {"mirror-hook": "denied", "mirror-config": "denied", "agent-cache": "denied",
                   "install": "denied", "ssh-keys": "denied", "other-copies": "denied",
                   "other-ledger": "denied", "other-archive": "denied", "corpus-digests": "denied",
                   "corpora": "denied", "ground-truth": "denied", "suites": "denied",
                   "own-ledger": "ok", "own-copy": "ok", "tmp": "ok", "pid1": "bwrap"}, got
    time.sleep(0.5)
    survivors = [cmd for pid, cmd in rig.lane_cmdlines() if f"{copy_a.name}/stolen" in cmd]
    assert survivors == [], f"A's watcher outlived its gate: {survivors}"

    r = h.nev(["lane", "run", str(wt_b), "sh", "-c", "grep -c NEV_MODEL_KEY .env"], rig.env)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    assert not (copy_a / "stolen").exists() or B_SECRET not in (copy_a / "stolen").read_text()
    # a job's verify, as a job's step runs it on the lane (outside any gate: nev's verify jail,
    # its ground-truth builder beside it), in B's copy: git there reads the mirror A attacked
    verify = ("git status --porcelain >/dev/null && git log -1 --format=%H && ls $NEV_TRUTH_SOCKET "
              "&& echo verified")
    cp = subprocess.run(["ssh", "-F", str(box.ssh_config), "-J", f"{box.name}-jump",
                         f"lane@{box.lanes[0].addr}",
                         f"cd {rig.lane_root_on_lane}/{h.copy_name(wt_b)} && NEV_ON_LANE=1 "
                         f"{LANE_HOME}/{layout.LOCAL_BIN}/nev sandbox exec -- sh -c '{verify}'"],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0 and cp.stdout.splitlines()[-1] == "verified", cp.stdout + cp.stderr
    # the agent's cache and the installs as they were (before the landing: nev's own first run
    # of an install outside any gate compiles its modules there)
    assert {"cache": _digest(cache), "installs": _digest(installs)} == before
    # a landing of another repository on the same lane: its gate (in the sandbox) on lane 0
    k, name = lane_kit(box, tmp_path, lanes=json.loads(box.lanes_file.read_text())["lanes"][:1])
    k.track(name, {"src/after-the-attack.txt": "landed\n"})
    landed = k.land(name, NEV_LANE_STRICT="1")
    assert landed.rc == 0 and len(gated_on_lane(landed.text)) == 1, landed.text
    for planted in ("hook-ran", "fsmon-ran", "cache-ran", "sbx-fsmon-ran", "sbx-hook-ran"):
        assert not (home / f"{planted}{rig.tag}").exists(), planted
    ledger_b = rig.nas / "ledger" / f"{h.copy_name(wt_b)}.jsonl"     # made (empty) by B's gate
    assert ledger_b.read_text() == ""
    assert not (rig.nas / "archive" / "gate-logs" / "x" / "planted").exists()
    for d in ("corpus-digests", "corpora", "ground-truth", "suites"):
        assert not (rig.nas / d / "x" / "planted").exists(), d
    assert not (rig.nas / "ledger" / f"someone-else{rig.tag}.jsonl").exists()
    r = h.nev(["lane", "run", str(wt_a), "true"], rig.env)
    assert r.returncode == 0, r.stderr


def test_a_1_gib_untracked_file_gates_in_bounded_memory(lane_rig, monkeypatch, capsys):
    """An untracked file of 1 GiB (sparse here) is streamed into the payload and out on the lane,
    never whole in memory: the development box's peak RSS grows by less than 100 MiB over the
    gate and the lane agent's stays under 100 MiB (both printed for the closing note)."""
    import resource

    from lanes import gate, lanesfile, payload
    from lanes.forge import forge_for

    rig = lane_rig
    wt = h.clone_worktree(rig.clone_url, rig.tmp / f"big{rig.tag}", rig.push_env)
    with open(wt / "big.bin", "wb") as f:
        f.truncate(1 << 30)
    for k, v in rig.env.items():
        if k.startswith("NEV_"):
            monkeypatch.setenv(k, v)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    lf = lanesfile.configured()
    picked = gate.pick_lane(lf, 0)
    assert picked is not None
    lane, conn = picked
    w = payload.Worktree.open(wt)
    out = bytearray()
    try:
        got = gate.gate_on_lane(lane, conn, w, ["stat", "-c", "%s", "big.bin"],
                                forge=forge_for(w.repo, lf), on_stdout=out.extend,
                                on_stderr=lambda b: None)
    finally:
        conn.close()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert got.status == 0 and out == b"1073741824\n", out
    assert got.result is not None and got.result.maxrss_kb is not None
    with capsys.disabled():
        print(f"\n1 GiB untracked file: development box peak RSS grew {grown} KB; "
              f"lane agent peak RSS {got.result.maxrss_kb} KB; payload untracked "
              f"{got.payload_sizes['untracked']} bytes gzip'd")
    assert grown < 100 * 1024, f"the development box's peak RSS grew {grown} KB"
    assert got.result.maxrss_kb < 100 * 1024, got.result.maxrss_kb
    (rig.lane_root / h.copy_name(wt) / "big.bin").unlink()


def test_two_gates_in_a_row_ride_one_kept_connection(lane_rig, monkeypatch):
    """The second of two gates reuses the first one's authenticated connection (NEV_SSH_PERSIST):
    the lane sees both sessions on one TCP connection from the jump host (one login), and the
    master `ssh -O check` finds is the same before and after it; its socket's folder is 0700."""
    from lanes import lanesfile
    from lanes.base import ssh

    rig = lane_rig
    wt = h.clone_worktree(rig.clone_url, rig.tmp / f"kept{rig.tag}", rig.push_env)
    env = {**rig.env, "NEV_SSH_PERSIST": "60"}
    show = ["lane", "run", str(wt), "sh", "-c", "echo $SSH_CONNECTION"]
    first = h.nev(show, env)
    assert first.returncode == 0, first.stderr
    for k, v in env.items():
        if k.startswith("NEV_"):
            monkeypatch.setenv(k, v)
    conn = lanesfile.configured().lanes[0].openssh()
    kept = ssh.control(conn.target, conn.jump, conn.known_hosts, conn.key_file)
    assert kept is not None
    assert (os.stat(Path(kept[0]).parent).st_mode & 0o777) == 0o700

    def master() -> str:
        p = subprocess.run(["ssh", "-O", "check", "-o", f"ControlPath {kept[0]}", "x"],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return p.stderr.strip()

    before = master()
    second = h.nev(show, env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split()[:2] == first.stdout.split()[:2], (first.stdout, second.stdout)
    assert master() == before
