"""B13: the soak. The box left running with the tick, jobs from two development boxes, and faults
on a schedule; what became of every job, and how long each fault took to heal.

On a rig-in-a-box of its own (NEV_BOX_NAME / NEV_BOX_NET, default "bsoak" on 198.18.13: a box
shared with tests would see their restarts as faults too; up here when it is down, brought down
at the end unless NEV_BOX_KEEP=1): two development boxes, A and B — two checkouts of two
repositories on the box's forge, two state folders — each submit a job every --every seconds
(a stage that writes a file and a stage that asks the gateway through the job's own key, so the
inventory check before the first stage matters), and each runs its tick (`nev job poll`) every
--tick seconds, as the crontab line of `nev job poll --install` would. Nothing refreshes the
inventory but the lanes' own services (`nev rig services`).

Faults, evenly spread over --minutes (each after the previous healed):
- lane0 rebooted from inside (`reboot` as the guest's root): healed when its SSH, Dagu and its
  services answer again — by the lane's own autostart (`nev dagu autostart on`, set up here as
  an operator would, and the services' @reboot line), nothing here restarts them;
- the gateway restarted (its unit's `restart`, as `systemctl restart litellm` on the rig):
  healed when it answers through the development box's forward;
- the gateway's forward killed (its ssh client, SIGKILL): healed when the forward's supervisor
  has it answering again;
- a replica drained and started (`nev rig drain gpu2/r0`, `nev rig start gpu2/r0`): healed
  when `start` returns (it waits for health and a real completion).

At the end (after a grace period for the last jobs) every job is landed, failed with its reason,
or lost (neither). Also counted: resends whose cause was a stale inventory snapshot while the
rig was healthy (the goal is none: the lanes keep their own snapshot fresh).

    .venv/bin/python bench/perf/b13_soak.py [--minutes 40] [--every 180] [--tick 60]

Prints the figures, appends a JSON line to bench/perf/results.jsonl. A benchmark, not a test:
it runs for --minutes (>= 40 for the soak the issue asks for; shorter runs check the script).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import yaml  # noqa: E402

from bench.perf.common import (  # noqa: E402
    CHECK,
    CHECK_HELP,
    ROOT,
    check_settings,
    git,
    publish,
    run_checked,
)

DAGU = "/opt/nev/dagu-1.30.2/dagu"
ALIAS = "qwen3.8-27b-fast"
NOTES: list[str] = []  # why a fault did not heal, printed with the figures


@dataclass
class Dev:
    """One development box: its checkout, state folder and environment."""

    name: str
    dir: Path
    env: dict[str, str]
    submitted: dict[str, float] = field(default_factory=dict)
    failed_submits: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def nev(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "rig.cli", *args],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def records(self) -> dict:
        p = Path(self.env["NEV_STATE_DIR"]) / "job-results.json"
        try:
            return json.loads(p.read_text()).get("jobs", {})
        except (OSError, ValueError):
            return {}


def _stages(job: str) -> list[dict]:
    ask = (
        f"mkdir -p out/{job}; umask 077; "
        'printf "Authorization: Bearer %s\\n" "$(cat "$NEV_MODEL_KEY_FILE")" > "$JOB_STATE/h"; '
        f'code=$(curl -s -o out/{job}/answer.json -w "%{{http_code}}" -H @"$JOB_STATE/h" '
        '-H "Content-Type: application/json" '
        f'-d \'{{"model": "{ALIAS}", "max_tokens": 8, "messages": '
        '[{"role": "user", "content": "write clamp_px"}]}\' '
        '"$NEV_LANE_MODEL_URL/v1/chat/completions"); '
        'rm -f "$JOB_STATE/h"; echo "gateway answered $code"; test "$code" = 200'
    )
    return [
        {
            "name": "gen",
            "kind": "command",
            "command": f"mkdir -p out/{job} && echo {job} > out/{job}/a.txt",
        },
        {"name": "ask", "kind": "batch", "models": [ALIAS], "command": ask},
    ]


def make_dev(name: str, tmp: Path, info, base_env: dict[str, str]) -> Dev:
    from rig.box.forge import create_repo

    d = tmp / name
    url = create_repo(info, f"soak-{name}-{int(time.time())}")
    env = {
        **base_env,
        "NEV_STATE_DIR": str(tmp / f"state-{name}"),
        "NEV_LANE_GIT_URL": url,
        "NEV_FORGE_URL": info.dev_url(url),
        "NEV_DAGU_BINARY": DAGU,
        "NEV_DAGU_POLL": "1",
    }
    git(tmp, "init", "-q", "-b", "main", str(d))
    (d / "README.md").write_text(f"soak {name}\n")
    (d / "tracks.json").write_text(
        json.dumps({"verify": "true", "specWatch": {"pollEnv": {}}}) + "\n"
    )
    (d / "specs").mkdir()
    git(d, "add", "-A")
    git(d, "commit", "-qm", "base")
    authed = info.dev_url(url).replace("://", f"://{info.forge_user}@", 1)
    git(d, "remote", "add", "origin", authed)
    genv = {**os.environ, "GIT_ASKPASS": str(info.forge_askpass), "GIT_TERMINAL_PROMPT": "0"}
    subprocess.run(["git", "-C", str(d), "push", "-q", "origin", "main"], check=True, env=genv)
    return Dev(name, d, env)


def submit(dev: Dev, n: int) -> None:
    job = f"soak-{dev.name}-{n}"
    with dev.lock:  # the tick commits landings in the same checkout
        (dev.dir / "specs" / f"{job}.md").write_text(
            f"---\ntouches:\n  - out/{job}/**\n---\n# {job}\n"
        )
        git(dev.dir, "add", "-A")
        git(dev.dir, "commit", "-qm", f"spec {job}")
        base = git(dev.dir, "rev-parse", "HEAD")
        m = dev.dir / "jobs" / f"{job}.yaml"
        m.parent.mkdir(exist_ok=True)
        m.write_text(
            yaml.safe_dump(
                {
                    "name": job,
                    "base": base,
                    "spec": f"specs/{job}.md",
                    "key": "batch",
                    "limit": "1h",
                    "stages": _stages(job),
                },
                sort_keys=False,
            )
        )
        r = dev.nev("job", "submit", str(m))
    if r.returncode == 0:
        dev.submitted[job] = time.time()
    else:
        dev.failed_submits.append(
            f"{job}: exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1]}"
        )


def tick(dev: Dev, log: list[str]) -> None:
    with dev.lock:
        r = dev.nev("job", "poll")
    log.extend(f"{time.strftime('%H:%M:%S')} {dev.name}: {ln}" for ln in r.stderr.splitlines())


def _wait(cond, timeout: float, every: float = 0.5) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if cond():
                return time.monotonic() - t0
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(every)
    return None


def _http_ok(url: str) -> bool:
    import requests

    try:
        return requests.get(url, timeout=3).status_code == 200
    except requests.RequestException:
        return False


def fault_lane_reboot(info, dev: Dev) -> float | None:
    from rig.box import guests
    from rig.box.netns import run_in

    before = guests.init_pid(info.dir, info.lanes[0].name)
    t0 = time.monotonic()
    run_in(info, info.lanes[0].name, ["/sbin/reboot"])
    _wait(lambda: guests.init_pid(info.dir, info.lanes[0].name) not in (before, None), 60, 0.1)

    def healed() -> bool:
        return (
            dev.nev("dagu", "status", timeout=60).returncode == 0
            and dev.nev("rig", "services", "status", "--lane", "0", timeout=60).returncode == 0
        )

    took = _wait(healed, 300, 1.0)
    return None if took is None else round(time.monotonic() - t0, 1)


def fault_gateway_restart(info, dev: Dev) -> float | None:
    unit = info.dir / "gateway" / "unit"
    netns = info.hosts["gateway"]["netns"]
    t0 = time.monotonic()
    subprocess.run(
        ["ip", "netns", "exec", netns, str(unit), "restart"], capture_output=True, timeout=300
    )
    url = dev.env["NEV_MODEL_URL"].rstrip("/") + "/health/liveliness"
    took = _wait(lambda: _http_ok(url), 300, 0.5)
    return None if took is None else round(time.monotonic() - t0, 1)


def fault_forward_killed(info, dev: Dev) -> float | None:
    from rig.box import Box
    from rig.forward import state as fst

    st = Box.from_settings().state()
    env = {
        "NEV_STATE_DIR": (st.forward_state if st else "") or str(Path.home() / ".local/state/nev"),
        "NEV_RIG_FILE": str(info.rig_file),
    }
    rec = fst.read(fst.Paths("gateway", fst.folder(env)))
    if rec is None or rec.ssh is None:
        return None
    t0 = time.monotonic()
    os.kill(rec.ssh.pid, signal.SIGKILL)
    url = dev.env["NEV_MODEL_URL"].rstrip("/") + "/health/liveliness"
    _wait(lambda: not _http_ok(url), 5, 0.1)
    took = _wait(lambda: _http_ok(url), 120, 0.2)
    return None if took is None else round(time.monotonic() - t0, 1)


def fault_replica_drain(info, dev: Dev) -> float | None:
    t0 = time.monotonic()
    for verb in ("drain", "start"):
        r = dev.nev("rig", verb, "gpu2/r0", timeout=600)
        if r.returncode != 0:
            NOTES.append(f"rig {verb} gpu2/r0: exit {r.returncode}: {r.stderr.strip()[-400:]}")
            return None
    return round(time.monotonic() - t0, 1)


FAULTS = [
    ("lane0 rebooted", fault_lane_reboot),
    ("gateway restarted", fault_gateway_restart),
    ("forward killed", fault_forward_killed),
    ("replica drained and started", fault_replica_drain),
]


def outcome(dev: Dev) -> dict:
    recs = dev.records()
    landed, failed, lost, stale = [], {}, [], 0
    for job in dev.submitted:
        rec = recs.get(job) or {}
        st = rec.get("status")
        if st == "landed":
            landed.append(job)
        elif st in ("failed", "not-landed"):
            failed[job] = rec.get("why") or st
        else:
            lost.append(f"{job} ({st or 'no record'})")
        why = str(rec.get("why") or "")
        if "old (limit" in why or "stale" in why:
            stale += 1
    return {
        "submitted": len(dev.submitted),
        "landed": len(landed),
        "failed": failed,
        "lost": lost,
        "refused_for_staleness": stale,
        "submit_failed": dev.failed_submits,
        "resends": sum(int((recs.get(j) or {}).get("resends") or 0) for j in dev.submitted),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--minutes", type=float, default=40.0, help="how long jobs are submitted and faults made"
    )
    ap.add_argument(
        "--every", type=float, default=180.0, help="seconds between one box's submissions"
    )
    ap.add_argument("--tick", type=float, default=60.0, help="seconds between one box's ticks")
    ap.add_argument(
        "--grace",
        type=float,
        default=600.0,
        help="seconds after the last submission for jobs to end",
    )
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    args = ap.parse_args()
    if args.check:
        return check_settings(
            box=True,
            default_name="bsoak",
            default_net="198.18.13",
            minutes=args.minutes,
            every=args.every,
            tick=args.tick,
            grace=args.grace,
        )
    from rig.box import Box

    os.environ.setdefault("NEV_BOX_NAME", "bsoak")
    os.environ.setdefault("NEV_BOX_NET", "198.18.13")
    b = Box.from_settings()
    info = b.info() if b.state() is not None else b.up(lanes=2)
    try:
        return soak(args, info)
    finally:
        from lanes.base import settings

        if not settings.get_flag(settings.BOX_KEEP):
            b.down()


def soak(args: argparse.Namespace, info) -> int:
    base_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "TRACKS_"))
    }
    base_env.update(info.env)
    base_env["PYTHONPATH"] = str(ROOT)
    tmp = Path(tempfile.mkdtemp(prefix="b13-"))
    devs = [make_dev(n, tmp, info, base_env) for n in ("a", "b")]
    for step in (("dagu", "up"), ("dagu", "autostart", "on")):  # as an operator sets the rig up
        r = devs[0].nev(*step)
        if r.returncode != 0:
            raise SystemExit(f"b13: nev {' '.join(step)} failed: {r.stderr.strip()[-300:]}")
    log: list[str] = []
    start = time.monotonic()
    end = start + args.minutes * 60
    faults: dict[str, float | None] = {}
    fault_at = [start + (i + 1) * args.minutes * 60 / (len(FAULTS) + 1) for i in range(len(FAULTS))]
    stop = threading.Event()

    def ticker(dev: Dev) -> None:
        while not stop.is_set():
            tick(dev, log)
            stop.wait(args.tick)

    def submitter(dev: Dev, offset: float) -> None:
        n = 0
        stop.wait(offset)
        while not stop.is_set() and time.monotonic() < end:
            n += 1
            submit(dev, n)
            print(
                f"[{(time.monotonic() - start) / 60:5.1f} min] {dev.name}: "
                f"submitted soak-{dev.name}-{n}",
                flush=True,
            )
            stop.wait(args.every)

    threads = [threading.Thread(target=ticker, args=(d,), daemon=True) for d in devs]
    threads += [
        threading.Thread(target=submitter, args=(d, i * args.every / 2), daemon=True)
        for i, d in enumerate(devs)
    ]
    for t in threads:
        t.start()
    for (what, fn), at in zip(FAULTS, fault_at, strict=True):
        time.sleep(max(0.0, at - time.monotonic()))
        print(f"[{(time.monotonic() - start) / 60:5.1f} min] fault: {what}", flush=True)
        faults[what] = fn(info, devs[0])
        print(
            f"[{(time.monotonic() - start) / 60:5.1f} min]   healed in {faults[what]} s", flush=True
        )
    time.sleep(max(0.0, end - time.monotonic()))
    # the grace period: ticks go on until every job ended or the grace is over
    deadline = time.monotonic() + args.grace
    while time.monotonic() < deadline:
        if all(not outcome(d)["lost"] for d in devs):
            break
        time.sleep(10)
    stop.set()
    for d in devs:
        tick(d, log)
    figures = {
        "minutes": args.minutes,
        "every_s": args.every,
        "tick_s": args.tick,
        "boxes": {d.name: outcome(d) for d in devs},
        "recovery_s": faults,
    }
    tot = {
        k: sum(
            len(v) if isinstance(v, (list, dict)) else v
            for v in (figures["boxes"][d.name][k] for d in devs)
        )
        for k in ("submitted", "landed", "failed", "lost", "refused_for_staleness")
    }
    figures["total"] = tot
    figures["notes"] = NOTES
    (tmp / "ticks.log").write_text("\n".join(log) + "\n")
    print(f"tick log: {tmp / 'ticks.log'}")
    publish("b13_soak", figures)
    return 0 if tot["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(run_checked(main))
