"""`nev doctor` against the rig-in-a-box, run from a folder that is not the checkout: all `ok` on
the healthy box; each fault planted in turn (a wrong jump host name, the key file gone, a lane's
host key changed, the forge's forward down, the gateway key refused, a declared alias the gateway
does not serve, the NAS folder missing, Dagu stopped) is named on its own line with its cause,
exit 1, each run within 30 s; all `ok` again once the fault is removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.dagu_helpers import DAGU
from tests.helpers.local_sshd import free_port

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 30.0


def nev(env: dict[str, str], cwd: Path, *args: str,
        timeout: float = 600) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    full.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def rig(box, tmp_path_factory):
    """The box's settings, nev installed on its lanes and Dagu up on lane 0 (what a healthy rig
    has after the quickstart's first commands)."""
    here = tmp_path_factory.mktemp("elsewhere")
    env = {**box.env, "NEV_DAGU_BINARY": DAGU, "NEV_STATE_DIR": str(here / "state"),
           "NEV_INVENTORY_LANE": "0", "NEV_DAGU_LANE": "0",
           "HOME": str(here / "home"), "XDG_CONFIG_HOME": str(here / "config")}
    for args in (("lane", "install"), ("dagu", "up")):
        r = nev(env, here, *args)
        assert r.returncode == 0, f"nev {' '.join(args)}: {r.stdout}\n{r.stderr}"
    return env, here


def doctor(env: dict[str, str], cwd: Path) -> tuple[int, dict[str, dict], float]:
    t0 = time.monotonic()
    r = nev(env, cwd, "doctor", "--json", timeout=120)
    took = time.monotonic() - t0
    assert "Traceback" not in r.stderr, r.stderr
    checks = {c["check"]: c for c in json.loads(r.stdout)}
    return r.returncode, checks, took


def failed(checks: dict[str, dict]) -> dict[str, str]:
    return {name: c["detail"] for name, c in checks.items() if not c["ok"]}


def test_doctor_names_each_planted_fault_on_its_own_line_and_passes_when_it_is_gone(rig, tmp_path):
    env, here = rig
    code, checks, took = doctor(env, here)
    assert code == 0 and not failed(checks), failed(checks)
    assert took < BUDGET_S
    healthy_s = took

    kh = Path(env["NEV_KNOWN_HOSTS"])
    lanes = json.loads(Path(env["NEV_LANES_FILE"]).read_text())
    lane1 = lanes["lanes"][1]["ssh"].split("@")[-1].split(":")[0]
    changed = tmp_path / "known_hosts"
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBmFvJ9mMSbqI3k5h8W3gC7n5pXb0T9eZ1zmfYx4Qy2L"
    changed.write_text("".join((f"{ln.split()[0]} {other}" if ln.split()[0] == lane1 else ln) + "\n"
                               for ln in kh.read_text().splitlines() if ln.strip()))
    no_nas = tmp_path / "lanes.json"
    lanes["lanes"][0]["shared"] = "/srv/no-such-nas"
    no_nas.write_text(json.dumps(lanes))
    revoked = tmp_path / "revoked.key"
    revoked.write_text("sk-revoked-0000000000000000000000\n")
    revoked.chmod(0o600)
    folknet = json.loads(Path(env["NEV_FOLKNET_FILE"]).read_text())
    first = next(iter(folknet["aliases"].values()))
    folknet["aliases"]["gone-alias"] = dict(first)
    gone = tmp_path / "folknet.json"
    gone.write_text(json.dumps(folknet))
    jump_user = env["NEV_LANE_JUMP"].split("@")[0]

    faults = {   # fault: (settings changed, the failing check, words of its cause)
        "jump host name wrong": ({"NEV_LANE_JUMP": f"{jump_user}@no-such-jump.invalid"},
                                 "jump host: name resolves", "name does not resolve"),
        "lane key missing": ({"NEV_SSH_KEY": str(tmp_path / "gone_ed25519")},
                             "pins and key", "does not exist"),
        "a lane's host key changed": ({"NEV_KNOWN_HOSTS": str(changed)},
                                      "lane 1 (lane1): login", "host key changed"),
        "forge forward down": ({"NEV_FORGE_URL": f"http://127.0.0.1:{free_port()}/git/engine.git"},
                               "forge (through its forward)", "does not answer"),
        "gateway key revoked": ({"NEV_MODEL_KEY_FILE": str(revoked)},
                                "gateway: key and aliases", "refused the key"),
        "one alias gone": ({"NEV_FOLKNET_FILE": str(gone)}, "gateway: key and aliases",
                           "gone-alias"),
        "NAS folder missing": ({"NEV_LANES_FILE": str(no_nas)}, "lane 0 (lane0): NAS",
                               "/srv/no-such-nas"),
    }
    times = {}
    for fault, (change, check, words) in faults.items():
        code, checks, took = doctor({**env, **change}, here)
        times[fault] = took
        bad = failed(checks)
        assert code == 1, f"{fault}: exit {code}"
        assert check in bad and words in bad[check], f"{fault}: {bad}"
        assert took < BUDGET_S, f"{fault}: {took:.1f} s"
    # only the jump host's failure takes the lanes and Dagu with it; the others fail alone
    code, checks, _ = doctor({**env, **faults["forge forward down"][0]}, here)
    assert set(failed(checks)) == {"forge (through its forward)"}

    stop = nev(env, here, "dagu", "stop")
    assert stop.returncode == 0, stop.stderr
    try:
        code, checks, took = doctor(env, here)
        times["Dagu stopped"] = took
        assert code == 1 and "not running" in failed(checks).get("Dagu", ""), failed(checks)
    finally:
        assert nev(env, here, "dagu", "start").returncode == 0
    code, checks, took = doctor(env, here)
    assert code == 0 and not failed(checks), failed(checks)
    print(f"doctor: healthy {healthy_s:.1f} s; "
          + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))


def test_doctor_with_a_dead_jump_host_costs_seconds(rig):
    env, here = rig
    silent = __import__("socket").socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    try:
        dead = f"nevjump@127.0.0.1:{silent.getsockname()[1]}"
        code, checks, took = doctor({**env, "NEV_LANE_JUMP": dead}, here)
    finally:
        silent.close()
    assert code == 1 and "jump host: port answers" in failed(checks)
    assert all(not c["ok"] for name, c in checks.items() if name.startswith("lane "))
    assert took < BUDGET_S, took
    print(f"doctor with a jump host that never answers: {took:.1f} s")
