"""Distributed mode: the coordinator on one lane, a supervised `dagu worker` on every lane, mTLS only.

Dagu 1.30.2 workers read and write run status and logs directly in Dagu's data
and log folders (there is no gRPC call for them) and find the coordinator through
a file in `data/service-registry/`, so both folders live on the NAS share at the
same absolute path on every lane. The coordinator binds the lane's rig address,
advertises it, and accepts only peers with a certificate from our CA; workers
present their lane's certificate and verify the coordinator's. Workflows that
must land on a lane carry a DAG-level `workerSelector` and are enqueued.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from dagu import daguconfig, pki
from dagu.layout import Layout
from dagu.service import (
    LOG_CAP_BYTES,
    LaneDagu,
    UpReport,
    clean_env,
    connect,
    if_running,
    pick_lane,
    prepare,
)
from lanes import lanesfile
from lanes.base.errors import NevError

SUPERVISOR_SRC = Path(__file__).resolve().parent / "supervise.py"
WORKER_MAX_ACTIVE = 1  # each worker polls 100 slots by default; 1 spreads concurrent runs over lanes
WORKER_LOG_CAP = 5 * 1024 * 1024
WORKER_WAIT = 30.0


class DistributedError(NevError):
    pass


# -- pure ----------------------------------------------------------------------

def worker_labels(index: int, browsers: bool, cores: int) -> dict[str, str]:
    return {"rig": "nev", "lane": str(index), "browsers": "yes" if browsers else "no", "cores": str(cores)}


def worker_start_script(layout: Layout) -> str:
    q = shlex.quote
    return f"""#!/bin/sh
# Written by `nev dagu up --distributed`: starts the supervised Dagu worker of this lane.
set -e
umask 077
mkdir -p {q(layout.run_dir)} {q(layout.tmp)}
{if_running(layout.worker_pid, "supervise")}  exit 0
fi
rm -f {q(layout.worker_pid)}  # stale: its supervisor died without removing it
cd {q(layout.root)}
{clean_env(layout)}  setsid nohup python3 {q(layout.supervisor)} --log {q(layout.worker_log)} --pidfile {q(layout.worker_pid)} \\
    --cap {WORKER_LOG_CAP} -- {q(layout.binary)} worker -c {q(layout.worker_config)} \\
    > /dev/null 2>&1 < /dev/null &
i=0
while [ ! -s {q(layout.worker_pid)} ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
"""


def worker_stop_script(layout: Layout) -> str:
    q = shlex.quote
    return f"""#!/bin/sh
# Written by `nev dagu up --distributed`: stops this lane's supervised worker (its whole process group).
{if_running(layout.worker_pid, "supervise")}  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL -- "-$pid" 2>/dev/null || true
fi
rm -f {q(layout.worker_pid)}
"""


# -- on a lane -------------------------------------------------------------------

def worker_script(ld: LaneDagu, stop: bool = False) -> str:
    return ld.layout.bin_dir + ("/worker-stop.sh" if stop else "/worker-start.sh")


def worker_pid(ld: LaneDagu) -> int | None:
    out = ld.sh(if_running(ld.layout.worker_pid, "supervise") + 'echo "$pid"\nfi', check=False).strip()
    return int(out) if out.isdigit() else None


def has_worker(ld: LaneDagu) -> bool:
    return ld.conn.run(f"test -f {shlex.quote(ld.layout.worker_config)}").exit_status == 0


def start_worker_if_configured(ld: LaneDagu) -> bool:
    if not has_worker(ld):
        return False
    if worker_pid(ld) is not None:
        return False
    ld.sh(f"/bin/sh {shlex.quote(worker_script(ld))}", timeout=30)
    if worker_pid(ld) is None:
        tail = ld.sh(f"tail -n 3 {shlex.quote(ld.layout.worker_log)} 2>/dev/null", check=False)
        raise DistributedError(f"the Dagu worker on {ld.lane.label} did not start: {' | '.join(tail.splitlines())}")
    return True


def stop_worker(ld: LaneDagu) -> bool:
    if not has_worker(ld):
        return False
    was = worker_pid(ld) is not None
    ld.sh(f"/bin/sh {shlex.quote(worker_script(ld, stop=True))} 2>/dev/null || true", check=False)
    return was


def has_server(ld: LaneDagu) -> bool:
    return ld.conn.run(f"test -f {shlex.quote(ld.layout.config)}").exit_status == 0


@dataclass
class Member:
    ld: LaneDagu
    addr: str


def _lane_facts(ld: LaneDagu) -> tuple[bool, int]:
    out = ld.sh("(command -v chromium >/dev/null 2>&1 || command -v firefox-esr >/dev/null 2>&1) "
                "&& echo yes || echo no; nproc", check=False).split()
    return (out[:1] == ["yes"]), int(out[1]) if len(out) > 1 and out[1].isdigit() else 1


def _push_tls(ld: LaneDagu, cert: pki.LaneCert, report: UpReport) -> daguconfig.Tls:
    L = ld.layout
    ld.sh(f"umask 077 && mkdir -p {shlex.quote(L.tls_dir)} && chmod 700 {shlex.quote(L.tls_dir)}")
    changed = False
    for path, data in ((L.tls_cert, cert.cert_pem), (L.tls_key, cert.key_pem), (L.tls_ca, cert.ca_pem)):
        if ld.read_opt(path) != data:
            ld.conn.write_file(path, data, 0o600)
            changed = True
    report.note(f"{ld.lane.label}: TLS certificate, key and CA (mode 600)", changed)
    return daguconfig.Tls(cert=L.tls_cert, key=L.tls_key, ca=L.tls_ca)


def up(coord_flag: int | None) -> UpReport:
    """Coordinator on the chosen lane, a supervised worker on every lane; all with mTLS."""
    report = UpReport()
    coord_lane = pick_lane(coord_flag)
    lanes = lanesfile.configured().lanes
    members: list[Member] = []
    try:
        for lane in lanes:
            ld = connect(lane, distributed_shared=lane.shared_dir)
            members.append(Member(ld, lane.target.host))
        for m in members:
            ld = m.ld
            L = ld.layout
            prepare(ld, report)
            tls = _push_tls(ld, pki.lane_cert(ld.lane.index, m.addr), report)
            report.note(f"{ld.lane.label}: supervisor",
                        ld.write_if_changed(L.supervisor, SUPERVISOR_SRC.read_text(), 0o700))
            report.note(f"{ld.lane.label}: worker scripts",
                        ld.write_if_changed(worker_script(ld), worker_start_script(L), 0o700)
                        | ld.write_if_changed(worker_script(ld, True), worker_stop_script(L), 0o700))
            browsers, cores = _lane_facts(ld)
            wc = daguconfig.WorkerConfig(layout=L, worker_id=f"lane{ld.lane.index}",
                                      labels=worker_labels(ld.lane.index, browsers, cores),
                                      max_active_runs=WORKER_MAX_ACTIVE, tls=tls)
            worker_changed = ld.write_if_changed(L.worker_config, daguconfig.render_worker(wc))
            report.note(f"{ld.lane.label}: worker.yaml", worker_changed)
            if ld.lane.index == coord_lane.index:
                pw_cfg = ld.read_opt(L.config)
                existing = daguconfig.parse_existing(pw_cfg.decode() if pw_cfg else None)
                pw = existing.password or ld.generate_password()
                sc = daguconfig.ServerConfig(layout=L, port=ld.port, password=pw, coord_port=ld.coord_port,
                                          queue_max=existing.queue_max, coord_host=m.addr,
                                          coord_advertise=m.addr, tls=tls)
                changed = ld.write_config(server=sc)
                report.note(f"{ld.lane.label}: config.yaml (coordinator on {m.addr}:{ld.coord_port}, mTLS)", changed)
                if changed and ld.pid() is not None:
                    ld.restart()
                    report.note(f"{ld.lane.label}: Dagu restarted", True)
                else:
                    report.note(f"{ld.lane.label}: Dagu started", ld.start())
            else:
                # a lane that only runs a worker keeps no server config
                ld.stop()
                ld.sh(f"rm -f {shlex.quote(L.config)}")
            if worker_changed:
                stop_worker(ld)
            report.note(f"{ld.lane.label}: worker started", start_worker_if_configured(ld))
        coord = next(m.ld for m in members if m.ld.lane.index == coord_lane.index)
        wait_workers(coord, [f"lane{m.ld.lane.index}" for m in members])
    finally:
        for m in members:
            m.ld.conn.close()
    return report


def wait_workers(coord: LaneDagu, ids: list[str], timeout: float = WORKER_WAIT) -> None:
    import time

    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    with coord.api() as api:
        while time.monotonic() < deadline:
            try:
                seen = {str(w.get("id")) for w in api.workers()}
            except NevError:
                seen = set()
            if set(ids) <= seen:
                return
            time.sleep(0.5)
    missing = sorted(set(ids) - seen)
    raise DistributedError(f"worker(s) {', '.join(missing)} did not register with the coordinator on "
                           f"{coord.lane.label} within {timeout:.0f} s; see ~/dagu/run/worker.log on those lanes")


__all__ = ["LOG_CAP_BYTES", "up", "start_worker_if_configured", "stop_worker", "has_server"]
