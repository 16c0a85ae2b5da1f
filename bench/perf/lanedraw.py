"""Batches drawing from one alias on the box's lanes at once, each the lane's own nev (its gateway
client, `bench.gateway.Gateway`: the pacer, the 429 handling and the in-flight slots of a batch),
for a fixed time; what each drew, and what the stand-in pool saw at once.

The key goes to the lane as a file (mode 600, over SSH stdin); the program runs with the lane's
installed nev's Python and reads the key from that file. Shared by the box tests of the gateway's
limits and B12 (bench/perf/b12_sharing.py)."""

from __future__ import annotations

import json
import shlex
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lanes import selfinstall
from lanes.base.ssh import Connection, Target

KEY_PATH = ".local/share/nev/draw-key"      # under the lane user's home

# Runs on the lane: ALIAS, INFLIGHT, SECONDS, URL as arguments; the key from its file.
PROGRAM = r'''
import json, os, sys, threading, time
from bench.gateway import Gateway, read_key, CallFailed
from pathlib import Path
alias, inflight, seconds, url = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
gw = Gateway(url, read_key(Path(os.path.expanduser("~/" + sys.argv[5]))), timeout_s=120)
gw.add_alias(alias, inflight, inflight)
print("ready", flush=True)
sys.stdin.readline()                      # the start line: every lane starts together
t0 = time.monotonic()
end = t0 + seconds
got = {"calls": 0, "choices": 0, "failed": 0, "rate_limited": 0, "gateway_waits": 0, "pacer_wait_s": 0.0,
       "done_at": []}
lock = threading.Lock()
def worker(i):
    seed = i * 100000
    while time.monotonic() < end:
        seed += 1
        try:
            texts, rec = gw.call(alias, [{"role": "user", "content": "write block_width"}], 1, seed)
        except CallFailed as e:
            rec, texts = e.record, []
        with lock:
            got["calls"] += 1
            got["choices"] += len(texts)
            got["failed"] += rec.status != "ok"
            got["rate_limited"] += rec.rate_limited
            got["gateway_waits"] += rec.gateway_waits
            got["pacer_wait_s"] += rec.pacer_wait_s
            if texts:
                got["done_at"].append(round(time.monotonic() - t0, 3))
ts = [threading.Thread(target=worker, args=(i,)) for i in range(inflight)]
for t in ts: t.start()
for t in ts: t.join()
got["span_s"] = round(time.monotonic() - t0, 3)
got["meter"] = gw.aliases[alias].meter.summary()
print("result " + json.dumps(got), flush=True)
'''


@dataclass
class Drawn:
    lane: int
    choices: int
    calls: int
    failed: int
    rate_limited: int
    gateway_waits: int
    span_s: float
    done_at: list[float]
    raw: dict[str, Any]

    def within(self, t: float) -> int:
        """Completions that came back in the first `t` seconds."""
        return sum(1 for d in self.done_at if d <= t)


def connect(box, lane: int) -> Connection:
    ln = box.lanes[lane]
    return Connection(Target.parse(ln.ssh), box.known_hosts, box.ssh_key, jump=Target.parse(box.jump)).connect()


def prepare(box, lanes: list[int], key_file: Path) -> list[Connection]:
    """nev installed on each lane (a no-op when it is already this nev) and the key in its file."""
    conns = []
    for i in lanes:
        c = connect(box, i)
        selfinstall.install(c, selfinstall.default_cache())
        c.run("mkdir -p ~/.local/share/nev", check=True)
        c.write_file(f"{c.run('echo $HOME').out.strip()}/{KEY_PATH}", key_file.read_bytes().strip() + b"\n", 0o600)
        conns.append(c)
    return conns


def draw(box, conns: list[Connection], alias: str, inflight: int, seconds: float) -> list[Drawn]:
    """Every lane draws from `alias` at `inflight` for `seconds`, started together."""
    py = f"$HOME/{selfinstall.VENV}/bin/python"
    args = " ".join(shlex.quote(str(a)) for a in (alias, inflight, seconds, box.gateway_url, KEY_PATH))
    chans = []
    for c in conns:
        ch = c.open_session(f"{py} -c {shlex.quote(PROGRAM)} {args}")
        chans.append(ch)
    files = [ch.makefile("rb") for ch in chans]
    for f, ch in zip(files, chans, strict=True):
        line = f.readline().decode()
        assert line.strip() == "ready", line + ch.makefile_stderr("rb").read().decode()
    for ch in chans:                       # start together
        ch.sendall(b"go\n")
    out: list[Drawn | None] = [None] * len(chans)

    def collect(k: int) -> None:
        for raw in files[k]:
            line = raw.decode()
            if line.startswith("result "):
                d = json.loads(line[len("result "):])
                out[k] = Drawn(lane=k, choices=d["choices"], calls=d["calls"], failed=d["failed"],
                               rate_limited=d["rate_limited"], gateway_waits=d.get("gateway_waits", 0),
                               span_s=d["span_s"], done_at=d["done_at"], raw=d)

    ts = [threading.Thread(target=collect, args=(k,)) for k in range(len(chans))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + 300)
    for k, ch in enumerate(chans):
        if out[k] is None:
            raise AssertionError(f"lane {k} gave no result: {ch.makefile_stderr('rb').read().decode()[-2000:]}")
        ch.close()
    return [d for d in out if d is not None]
