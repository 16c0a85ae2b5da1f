"""`nev job status NAME --follow` on the rig-in-a-box: a job submitted from this (dev) box runs in
lane0's real Dagu; its stage prints a line every second, and --follow, reaching the lane through
the jump host as every lane user does, shows each line within 5 s and exits with the job's code
when the job ends."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest

# the module's rig: Dagu up on lane0, a forge repository
from tests.test_job_box import Rig, rig  # noqa: F401

pytestmark = pytest.mark.box

TICKS = 12


def test_follow_shows_each_new_stage_line_within_5_s_and_exits_when_the_job_ends(
        rig: Rig):  # noqa: F811
    stages = [{"name": "tick", "kind": "command",
               "command": f"for i in $(seq 1 {TICKS}); do echo tick-$i-$(date +%s.%N); "
                          "sleep 1; done"}]
    run_id = rig.job("followme", stages)
    p = subprocess.Popen([sys.executable, "-m", "rig.cli", "job", "status", "followme", "--follow"],
                         cwd=rig.dev, env=rig.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    got: list[tuple[float, str]] = []

    def read() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            got.append((time.time(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert p.wait(300) == 0, (got, p.stderr.read() if p.stderr else "")
    ended = time.time()
    reader.join(5)
    lines = [x for _, x in got]
    assert lines[-1] == "== job followme: passed (exit 0)", lines
    header = next(t for t, x in got if x.startswith("== log of stage tick"))
    live = [(t, x) for t, x in got if re.fullmatch(r"tick-\d+-[\d.]+", x) and t > header + 1.5]
    assert len(live) >= 5, lines                         # lines printed as they came, not a tail
    delays = [t - float(x.split("-", 2)[2]) for t, x in live]
    print(f"follow on the box: {len(live)} lines, delay max {max(delays):.2f} s, "
          f"median {sorted(delays)[len(delays) // 2]:.2f} s")
    assert max(delays) < 5.0, delays
    numbers = [int(x.split("-")[1]) for x in lines if x.startswith("tick-")]
    assert numbers == sorted(set(numbers)) and numbers[-1] == TICKS   # each once, in order, all
    assert rig.step_exit(run_id, "run") == "0"
    last = max(float(x.split("-", 2)[2]) for x in lines if x.startswith("tick-"))
    assert ended - last < 15                               # it ended with the job, not much later
