"""B2: overhead of `nev lane run WORKTREE true` on a warm lane copy, against `ssh lane true`.

Runs on the rig-in-a-box (NEV_BOX_NAME / NEV_BOX_NET pick the box; it is brought up if needed
and left up). Both are timed alternately on lane 0 through the jump host, as on the real rig
(unshaped links): the `nev` CLI as a user runs it (interpreter start included), the gate
in-process (its channel: one OpenSSH client through the jump host, as `nev lane run` opens it),
and `ssh -J jump lane true` (the ssh CLI with the box's client config, whose ProxyJump is the
jump host). The in-process gate is timed with the gate's own jail (as every gate runs since issue
41) and without it (`jail_cost_s`: the jail's share of a warm gate). The CLI is timed with the kept
connection per lane (`NEV_SSH_PERSIST=60`: the gates after the first ride one authenticated
connection, `lanes.base.ssh.control`) and without it (`NEV_SSH_PERSIST=0`: a login per gate), so
the last figures are the three of the goal: bare `ssh -J`, the gate without, the gate with.

Where the time went (2026-12-01, 2 cores, load ~6): the CLI's overhead was ~0.45-1.3 s, of which
paramiko's import (with cryptography, nacl and importlib.metadata's scan for its version) and its
two pure-Python handshakes were most; click ~30-50 ms. The gate now opens its channel with the
OpenSSH client (`lanes.base.openssh.OpenSsh`; no paramiko loaded) and starts it before the rest of
nev is imported (`lanes.ahead`), so the imports, the worktree's git reads and the forge lookup
happen while the client connects (since 2026-12-01 that client is started from the argv the last
gate recorded, `lanes.quick`, before nev itself loads: ssh starts ~50 ms after the interpreter, not
~100 ms; the no-record runs here are that change's baseline; and a plain gate ends without the
interpreter's module teardown, ~15 ms); the plain `nev lane run|on` is parsed without click; the
payload's diff and untracked files are made while the lane's hello is on its way; the lane's
agent starts with `python3 -I -S` (no site) and runs the code its last start compiled. Overhead
at a load of ~7: 1.36 s before, 0.255 s after; back to back at ~3.5: 0.37 s before, 0.23-0.32 s
after (in-process 0.14 s both: the gain is the CLI's start); the gate imports 155 modules, not 320.
What is left on the critical path: the handshake itself (the baseline), the agent's start on the
lane (~0.1 s: its modules compiled and their stdlib imports), hello, the payload (~25 ms of git
here), the lane's prepare (~50 ms of git there) and the result. Prints medians and the ratio last; appends a JSON
line to bench/perf/results.jsonl. Peak RSS is per process (wait4), never summed.

    .venv/bin/python bench/perf/b02_gate_overhead.py [--runs 10]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.perf.common import CHECK, CHECK_HELP, ROOT, check_settings, git, publish, run_checked  # noqa: E402
from lanes import gate, lanesfile, payload  # noqa: E402
from lanes.forge import forge_for  # noqa: E402
from rig.box import Box  # noqa: E402
from rig.box.forge import create_repo  # noqa: E402


def timed(argv: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, int | None, int]:
    """(wall seconds, peak RSS in KB of that one process, exit status).

    The peak comes from GNU time's child: a process forked from this (large) interpreter would
    report this interpreter's peak as its own.
    """
    with tempfile.NamedTemporaryFile("r") as rss:
        t0 = time.perf_counter()
        rc = subprocess.run(["/usr/bin/time", "-q", "-f", "%M", "-o", rss.name, *argv], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        wall = time.perf_counter() - t0
        text = rss.read().strip().splitlines()
    return wall, int(text[-1]) if text and text[-1].isdigit() else None, rc


def make_worktree(info, tmp: Path, tag: str) -> tuple[Path, str]:
    """A repository on the box forge (a few files), cloned, with a commit, a diff, an untracked file."""
    url = create_repo(info, f"b02{tag}.git")
    askpass = {"GIT_ASKPASS": str(info.forge_askpass)}
    seed = tmp / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    for i in range(50):
        (seed / f"file{i}.txt").write_text(f"line {i}\n" * 200)
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "seed")
    git(seed, "push", "-q", info.dev_url(url), "main", env=askpass)      # through the dev box's forward
    wt = tmp / f"b02{tag}"
    git(tmp, "clone", "-q", info.dev_url(url), str(wt), env=askpass)
    (wt / "unpushed.txt").write_text("unpushed\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "unpushed")
    (wt / "file1.txt").write_text("changed\n")
    (wt / "untracked.txt").write_text("untracked\n")
    return wt, url


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    args = ap.parse_args()
    if args.check:
        return check_settings(box=True, runs=args.runs)
    # Bytecode as an installed nev has it: without it every run compiles each module it imports
    # (PYTHONDONTWRITEBYTECODE in the caller's environment would measure that instead).
    for pkg in ("bench", "crates_bridge", "dagu", "jobs", "lanes", "rig"):
        compileall.compile_dir(str(ROOT / pkg), quiet=1, rx=re.compile(r"/(target|\.box)/"))
    info = Box.from_settings().up(lanes=2)
    lane = info.lanes[0]
    tag = "-" + secrets.token_hex(2)
    with tempfile.TemporaryDirectory(prefix="nev-b02-") as tmpd:
        tmp = Path(tmpd)
        wt, url = make_worktree(info, tmp, tag)
        lanes_file = tmp / "lanes.json"
        data = json.loads(info.lanes_file.read_text())
        data["lanes"], data["git_url"] = data["lanes"][:1], url
        lanes_file.write_text(json.dumps(data))
        env = {**os.environ, **info.env, "NEV_LANES_FILE": str(lanes_file), "NEV_LANE_GIT_URL": url,
               "PYTHONPATH": str(ROOT)}
        os.environ.update({k: v for k, v in env.items() if k.startswith("NEV_")})
        nev = [sys.executable, "-m", "rig.cli", "lane", "run", str(wt), "true"]
        ssh = ["ssh", "-F", str(info.ssh_config), "-J", f"{info.name}-jump", f"lane@{lane.addr}", "true"]
        # The same CLI with its record (`lanes.quick`: the client started before nev loads) and,
        # as the baseline of that change, without one (its cache's record removed before each run).
        env_norec = {**env, "XDG_CACHE_HOME": str(tmp / "cache-norec")}
        env = {**env, "XDG_CACHE_HOME": str(tmp / "cache"), "NEV_SSH_PERSIST": "60"}
        # and without the kept connection (`lanes.base.ssh.control`): one login per gate
        env_plain = {**env, "NEV_SSH_PERSIST": "0"}
        record = tmp / "cache-norec" / "nev" / "gate-argv.json"
        first, _, rc = timed(nev, env)  # the cold run: mirror fetch, worktree add
        assert rc == 0, "the first gate failed; run it by hand to see why"
        cli: list[float] = []
        plain: list[float] = []
        norec: list[float] = []
        ssh_t: list[float] = []
        inproc: list[float] = []
        nojail: list[float] = []
        jail_of = gate.gate_jail
        rss = {"nev_cli": 0, "ssh": 0, "lane_apply": 0}
        for _ in range(args.runs):
            t, r, rc = timed(ssh, env)
            assert rc == 0
            ssh_t.append(t)
            rss["ssh"] = max(rss["ssh"], r or 0)
            t, r, rc = timed(nev, env)
            assert rc == 0
            cli.append(t)
            rss["nev_cli"] = max(rss["nev_cli"], r or 0)
            t, _, rc = timed(nev, env_plain)
            assert rc == 0
            plain.append(t)
            record.unlink(missing_ok=True)
            t, _, rc = timed(nev, env_norec)
            assert rc == 0
            norec.append(t)
            # in-process, with the gate's own jail (as every gate runs) and without it (the jail's
            # options left out of the payload: the command run bare, as before issue 41)
            for series, jail in ((inproc, jail_of), (nojail, lambda *a, **k: [])):
                gate.gate_jail = jail  # type: ignore[assignment]
                t0 = time.perf_counter()
                lf = lanesfile.configured()
                ln = lf.lanes[0]
                conn = ln.openssh()       # the gate's own route: the OpenSSH client, one process
                w = payload.Worktree.open(wt)
                out = gate.gate_on_lane(ln, conn, w, ["true"], forge=forge_for(w.repo, lf),
                                        on_stdout=lambda b: None, on_stderr=lambda b: None)
                conn.close()
                series.append(time.perf_counter() - t0)
                gate.gate_jail = jail_of  # type: ignore[assignment]
                rss["lane_apply"] = max(rss["lane_apply"], int(out.result.maxrss_kb or 0))
        med = {k: statistics.median(v) for k, v in (("ssh", ssh_t), ("nev_cli", cli), ("gate_inproc", inproc),
                                                    ("norec", norec), ("nojail", nojail),
                                                    ("plain", plain))}
        fig = {
            "runs": args.runs, "route": "via jump host", "first_gate_s": round(first, 3),
            "ssh_true_s": round(med["ssh"], 3), "nev_lane_run_true_s": round(med["nev_cli"], 3),
            "gate_inprocess_s": round(med["gate_inproc"], 3),
            "nev_lane_run_true_no_record_s": round(med["norec"], 3),
            "overhead_cli_s": round(med["nev_cli"] - med["ssh"], 3),
            "overhead_cli_no_record_s": round(med["norec"] - med["ssh"], 3),
            "overhead_inprocess_s": round(med["gate_inproc"] - med["ssh"], 3),
            "gate_inprocess_no_jail_s": round(med["nojail"], 3),
            "jail_cost_s": round(med["gate_inproc"] - med["nojail"], 3),
            "bytes_sent_warm": out.bytes_sent,
            "peak_rss_kb": {k: (v or None) for k, v in rss.items()},
            "nev_lane_run_true_no_kept_connection_s": round(med["plain"], 3),
            "ratio_cli_no_kept_connection_vs_ssh": round(med["plain"] / med["ssh"], 2),
            "ratio_cli_vs_ssh": round(med["nev_cli"] / med["ssh"], 2),
        }
    publish("B2", fig)
    return 0


if __name__ == "__main__":
    sys.exit(run_checked(main))
