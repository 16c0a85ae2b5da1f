"""`nev oracle audio`: does a realtime AudioContext run in each of the three browsers here?

A page makes an AudioContext and plays a silent oscillator into it; a click (a person's gesture,
which the engines' autoplay rules ask for) resumes it; the engine (started as the oracle starts it,
`bench.oracle.engines`) is then asked, without
navigating, for the context's state and clock until it is `running` with its clock moving, or
`WAIT_S` is over. On a lane the sound goes to the lane's PulseAudio null sink (`lanes/audio.py`);
with no audio device at all the context stays `suspended` (or fails to start) in some engines.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.oracle.engines import Engine

WAIT_S = 10.0
PAGE = """<!doctype html><meta charset="utf-8"><title>nev audio check</title>
<script>
window.__nevAudio = {ctx: null, error: ""};
try {
  const ctx = new AudioContext();
  const osc = ctx.createOscillator(), gain = ctx.createGain();
  gain.gain.value = 0;
  osc.connect(gain); gain.connect(ctx.destination); osc.start();
  window.__nevAudio.ctx = ctx;
} catch (e) { window.__nevAudio.error = String(e); }
function go() {
  const c = window.__nevAudio.ctx;
  if (c) c.resume().catch(e => { window.__nevAudio.error = String(e); });
}
</script>
<button onclick="go()" style="position:fixed;left:0;top:0;width:200px;height:100px">play</button>
"""
CLICK = (100, 50)  # the button: a person's click is the gesture every engine's autoplay rule asks
STATE = (
    "const a = window.__nevAudio || {}; const c = a.ctx; return JSON.stringify({"
    "state: c ? c.state : 'none', time: c ? c.currentTime : 0, "
    "rate: c ? c.sampleRate : 0, error: a.error || ''});"
)


@dataclass(frozen=True)
class Outcome:
    engine: str
    version: str
    state: str  # running | suspended | closed | none (no context) | error
    clock_s: float  # the context's currentTime when last read
    sample_rate: float
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.state == "running" and self.clock_s > 0

    def line(self) -> str:
        head = f"{self.engine:<9} {self.version or '-':<18} AudioContext {self.state}"
        if self.ok:
            return f"{head}, clock {self.clock_s:.2f} s at {self.sample_rate:g} Hz"
        return (
            head
            + (f": {self.error}" if self.error else "")
            + (f" (clock {self.clock_s:.2f} s)" if self.state == "running" else "")
        )


def check(name: str, wait_s: float = WAIT_S) -> Outcome:
    """One engine: started, the page loaded, the context watched until it runs or `wait_s`."""
    from bench.oracle.engines import make

    eng = make(name)
    with tempfile.TemporaryDirectory(prefix="nev-audio-") as d:
        page = Path(d) / "audio.html"
        page.write_text(PAGE, encoding="utf-8")
        return _watch(eng, name, page, wait_s)


def _watch(eng: Engine, name: str, page: Path, wait_s: float) -> Outcome:
    from bench.oracle.engines import EngineError

    try:
        eng.start()
        eng.load(page)
        eng.click(*CLICK)
        deadline = time.monotonic() + wait_s
        while True:
            got = json.loads(eng.evaluate(STATE))
            out = Outcome(
                name,
                eng.version,
                str(got["state"]),
                float(got["time"] or 0),
                float(got["rate"] or 0),
                str(got["error"]),
            )
            if out.ok or time.monotonic() > deadline:
                return out
            time.sleep(0.2)
    except (EngineError, OSError, TimeoutError, ValueError, KeyError) as e:
        return Outcome(name, "", "error", 0.0, 0.0, " ".join(str(e).split())[:300])
    finally:
        eng.stop()


def check_all(names: Sequence[str], wait_s: float = WAIT_S) -> list[Outcome]:
    return [check(n, wait_s) for n in names]


def to_json(outs: Sequence[Outcome]) -> list[dict[str, object]]:
    return [{**asdict(o), "ok": o.ok} for o in outs]
