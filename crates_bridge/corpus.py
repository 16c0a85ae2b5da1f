"""The corpus folder format agreed with the oracle (`corpus/<name>/manifest.json` + `cases.jsonl`).

The oracle writes real corpora from three browsers. Until it lands, and in
tests, `write_reference_corpus` writes one from the engine's hand-written
reference (`engines: {"reference": ...}`), in the same format.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from crates_bridge.errors import BridgeError, load_json
from crates_bridge.workspace import Workspace
from lanes.base import sandbox

FORMAT = 1
DEFAULT_TOLERANCE_PX = 1 / 30
REFERENCE_BIN = "reference_cases"
GENERATOR = {"name": "crates_bridge.corpus", "version": "1"}


@dataclass(frozen=True)
class Manifest:
    function: str
    cases: int | None
    tolerance_px: float
    engines: dict[str, str]
    raw: dict


def read_manifest(folder: Path) -> Manifest:
    path = folder / "manifest.json"
    d = load_json(path, "corpus manifest", f"no corpus here; build it with `nev oracle build {folder.name}`")
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise BridgeError(f"{path}: format is not {FORMAT}; rebuild the corpus with this version")
    tol, cases, engines = d.get("tolerance_px", DEFAULT_TOLERANCE_PX), d.get("cases"), d.get("engines") or {}
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or tol < 0:
        raise BridgeError(f"{path}: field tolerance_px must be a number >= 0, not {tol!r:.40}; rebuild the corpus")
    if cases is not None and (isinstance(cases, bool) or not isinstance(cases, int) or cases < 0):
        raise BridgeError(f"{path}: field cases must be a whole number >= 0, not {cases!r:.40}; rebuild the corpus")
    if not isinstance(engines, dict) or not all(isinstance(v, str) for v in engines.values()):
        raise BridgeError(f"{path}: field engines must be an object of version strings; rebuild the corpus")
    return Manifest(str(d.get("function")), cases, float(tol), dict(engines), d)


#: One case's input: each field a CSS length as written ("12px", "30%", "auto") or a number of px.
CaseInput = dict[str, str | float]


def _len(rng: random.Random, *, auto: bool = True, pct: bool = True, neg: bool = False) -> str:
    r = rng.random()
    if auto and r < 0.35:
        return "auto"
    if pct and r < 0.55:
        return f"{rng.randint(0, 60)}%"
    lo = -40 if neg else 0
    return f"{rng.randint(lo, 300)}px"


def _element(rng: random.Random) -> CaseInput:
    """The element's horizontal box, drawn in this order: width, margins, padding, borders."""
    return {
        "width": _len(rng),
        "margin_left": _len(rng, neg=True),
        "margin_right": _len(rng, neg=True),
        "padding_left": _len(rng, auto=False),
        "padding_right": _len(rng, auto=False),
        "border_left": f"{rng.randint(0, 12)}px",
        "border_right": f"{rng.randint(0, 12)}px",
    }


def block_width_input(seed: int) -> CaseInput:
    rng = random.Random(f"block_width:{seed}")
    return {"cb_width": float(rng.choice([0, 100, 240, 320, 480, 600, 1000])), **_element(rng)}


def abspos_width_input(seed: int) -> CaseInput:
    rng = random.Random(f"abspos_width:{seed}")
    return {
        "cb_width": float(rng.choice([100, 240, 320, 480, 600, 1000])),
        "left": _len(rng, neg=True),
        "right": _len(rng, neg=True),
        **_element(rng),
        "content_width": float(rng.randint(0, 400)),
    }


#: Deterministic input generators for the test corpora, by function.
INPUTS: dict[str, Callable[[int], CaseInput]] = {
    "block_width": block_width_input,
    "abspos_width": abspos_width_input,
}


def content_mismatch(folder: Path, manifest: Manifest | None = None) -> str | None:
    """Why the corpus's cases are not the bytes it was published with (None: they are): its
    manifest carries the sha256 of `cases.jsonl` (`content_sha256`), written by the oracle's builder
    or `write_corpus`; a corpus changed afterwards is never scored against."""
    man = manifest or read_manifest(folder)
    want = man.raw.get("content_sha256")
    if not isinstance(want, str) or not want:
        return "its manifest carries no content hash (content_sha256)"
    h = hashlib.sha256()
    try:
        with open(folder / "cases.jsonl", "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        return f"cases.jsonl cannot be read ({e.strerror})"
    if h.hexdigest() != want:
        return "its cases.jsonl no longer matches the content hash its manifest carries (changed after it was published)"
    return None


def check_content(folder: Path, manifest: Manifest | None = None) -> None:
    """BridgeError naming the corpus when its bytes are not those it was published with."""
    why = content_mismatch(folder, manifest)
    if why is not None:
        raise BridgeError(f"{folder} is not ground truth: {why}; rebuild it (`nev oracle build {folder.name}`); "
                          "nothing was scored against it")


def write_corpus(folder: Path, function: str, cases: list[dict], engines: dict[str, str],
                 start: int = 0, tolerance_px: float = DEFAULT_TOLERANCE_PX) -> Path:
    """Write `cases` (each with id, seed, input, expected) as a corpus folder."""
    folder.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps(c, sort_keys=True) + "\n" for c in cases).encode()
    (folder / "cases.jsonl").write_bytes(body)
    manifest = {"format": FORMAT, "function": function, "generator": GENERATOR, "engines": engines,
                "tolerance_px": tolerance_px, "seeds": {"start": start, "count": len(cases), "shard": "0/1"},
                "cases": len(cases), "content_sha256": hashlib.sha256(body).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return folder


def reference_cases(ws: Workspace, function: str, count: int, start: int = 0) -> list[dict]:
    """`count` cases from seed `start`, answered by the workspace's hand-written reference."""
    gen = INPUTS.get(function)
    if gen is None:
        raise BridgeError(f"no test input generator for `{function}`; known: {', '.join(sorted(INPUTS))}")
    lines = "".join(json.dumps({"id": f"{function}-{s:06d}", "seed": s, "input": gen(s)}) + "\n"
                    for s in range(start, start + count))
    binary = ws.build().binary(REFERENCE_BIN)
    # the binary links the engine's layout crate, model-written functions and all: in the sandbox
    jail = sandbox.Jail(read=(binary,), limits=sandbox.Limits.from_settings(cpu_s=310))
    cp = sandbox.run([str(binary), function], jail, timeout=300, stdin=lines.encode())
    if cp.timed_out:
        raise BridgeError(f"{REFERENCE_BIN} {function} ran over 300 s; stopped")
    if cp.returncode != 0:
        raise BridgeError(f"{REFERENCE_BIN} {function} failed: {cp.stderr.strip()[:300]}")
    return [json.loads(x) for x in cp.stdout.splitlines() if x.strip()]


def write_reference_corpus(ws: Workspace, function: str, folder: Path, count: int = 200,
                           start: int = 0) -> Path:
    """A test corpus in the agreed format, its answers from the hand-written reference."""
    cases = reference_cases(ws, function, count, start)
    return write_corpus(folder, function, cases, {"reference": "layout-" + _crate_version(ws)}, start)


def _crate_version(ws: Workspace) -> str:
    for line in (ws.root / "Cargo.toml").read_text().splitlines():
        if line.strip().startswith("version"):
            return line.split("=", 1)[1].strip().strip('"')
    return "0"
