"""The stand-in replicas' unit scripts: start|stop|status, the shape of a systemd unit on the
real rig, so `nev rig start|stop|drain` and the box itself run them the same way."""

from __future__ import annotations

from rig.box.plan import Pool

UNIT_SH = """#!/bin/sh
# {what}: start|stop|status, as `systemctl` runs a unit on the real rig (written by nev box)
PIDS={pids}
LOG={log}
HEALTH={health}
alive() {{ [ -s "$PIDS" ] || return 1; for p in $(cat "$PIDS"); do kill -0 "$p" 2>/dev/null || return 1; done; }}
any_alive() {{ [ -s "$PIDS" ] || return 1; for p in $(cat "$PIDS"); do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }}
healthy() {{ curl -fsS --noproxy '*' -o /dev/null --max-time 2 "$HEALTH"; }}
case "${{1:-}}" in
start)
  if alive && healthy; then exit 0; fi
  "$0" stop
  cd {project} || exit 1
  : > "$PIDS.new"
{launch}  mv -f "$PIDS.new" "$PIDS"
  i=0
  while ! healthy; do
    alive || {{ echo "{what} exited while starting; see $LOG" >&2; exit 1; }}
    i=$((i + 1)); [ "$i" -gt 300 ] && {{ echo "{what} not healthy after 30 s; see $LOG" >&2; exit 1; }}
    sleep 0.1
  done ;;
stop)
  [ -s "$PIDS" ] || exit 0
  kill $(cat "$PIDS") 2>/dev/null
  i=0
  while any_alive && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  any_alive && kill -9 $(cat "$PIDS") 2>/dev/null
  rm -f "$PIDS" ;;
status)
  alive && healthy ;;
*)
  echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
"""


def unit_script(pool: Pool, replica: str, addr: str, python: str, project: str, bank: str, pids: str,
                log: str, journal_dir: str) -> str:
    """The stand-in replica's unit: the same start/stop/status shape as a systemd unit, so
    `nev rig start|stop|drain` run the same code on the box as on the rig."""
    launch = []
    for name, port in pool.processes(replica):
        argv = [python, "-m", "rig.box.pool", "--addr", addr, "--port", str(port), "--name", name,
                "--bank", bank, "--model", f"{pool.alias}={pool.tier}", "--max-inflight", str(pool.maxconn),
                "--journal", f"{journal_dir}/{name}.journal"]
        launch.append(f"  env PYTHONPATH={project} PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8 setsid "
                      + " ".join(argv) + ' </dev/null >>"$LOG" 2>&1 &\n  echo $! >> "$PIDS.new"\n')
    return UNIT_SH.format(what=f"stand-in {pool.name}/{replica}", pids=pids, log=log, project=project,
                          health=f"http://{addr}:{pool.port(replica)}/health", launch="".join(launch))


HAPROXY_SH = """#!/bin/sh
# the box's HAProxy on the proxy host: start|stop|status, as `systemctl` runs haproxy.service on
# the real rig (written by nev box); the proxy role's `start` and `status` (rig/serving/mend.py)
PID={pid}
alive() {{ [ -s "$PID" ] && kill -0 "$(cat "$PID")" 2>/dev/null; }}
case "${{1:-}}" in
start)
  alive && exit 0
  {haproxy} -W -D -p "$PID" -f {cfg} ;;
stop)
  alive || exit 0
  kill "$(cat "$PID")"
  i=0
  while alive && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  alive && kill -9 "$(cat "$PID")"
  rm -f "$PID" ;;
status)
  alive ;;
*)
  echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
"""


def haproxy_script(cfg: str, pid: str, haproxy: str = "/usr/sbin/haproxy") -> str:
    """HAProxy's unit: master-worker, daemonized, its master's PID in `pid` (the reload's signal
    goes there too)."""
    return HAPROXY_SH.format(cfg=cfg, pid=pid, haproxy=haproxy)
