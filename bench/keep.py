"""A passing version kept: `generated/<function>.rs` with the spec's steps as comments, its
provenance record (never rewritten) and its floor (only raised)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench import prompt
from bench.answers import Candidate
from bench.rounds import RoundRecord, now
from bench.verdicts import Judged, pass_at
from crates_bridge.registry import FLOOR_SUFFIX, PROVENANCE_SUFFIX, Floor, load_floor, write_floor
from crates_bridge.workspace import Workspace
from lanes.base import jsonfile
from lanes.base.errors import NevError


def kept_source(spec: prompt.Spec, source: str, batch_id: str) -> str:
    """The kept version as committed: a header naming the spec and batch, the steps as comments."""
    head = [f"// Generated: {spec.heading}.", f"// Source: {spec.source}",
            f"// Provenance: {spec.function}{PROVENANCE_SUFFIX} beside this file (batch {batch_id}).",
            "// Spec steps:"]
    head += [f"//   {i}. {s}" for i, s in enumerate(spec.steps, 1)]
    return "\n".join(head) + "\n" + source.lstrip()


@dataclass
class _Tally:
    """One model's candidates in the kept version's batch (the record's `batch.models[]`)."""

    alias: str
    candidates: int = 0
    compiled: int = 0
    best: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"alias": self.alias, "candidates": self.candidates, "compiled": self.compiled,
                "best": self.best}


def is_placeholder(record: dict) -> bool:
    b = record.get("batch")
    return not (isinstance(b, dict) and b.get("models"))


def keep(ws: Workspace, spec: prompt.Spec, signature: str, batch_id: str, win: Judged, cands: list[Candidate],
         judged: dict[str, Judged], rounds: list[RoundRecord], corpus_dir: Path, run_dir: Path,
         inputs: Mapping[str, object] | None = None, supersede: bool = False) -> Path:
    """Write the passing version, its provenance record and its floor beside the engine's generated
    functions; a provenance of an earlier batch is never rewritten (the version is left in
    `run_dir`, and the refusal names it). `inputs` (bench.provenance) make the record complete
    (format 2). `supersede` (a regeneration): a new version of the function takes the place of an
    earlier batch's, with a new record naming the one it supersedes (git keeps the old one); a
    record of this very batch is never replaced."""
    gen = ws.generated_dir
    src_path = gen / f"{spec.function}.rs"
    prov_path = gen / f"{spec.function}{PROVENANCE_SUFFIX}"
    floor_path = gen / f"{spec.function}{FLOOR_SUFFIX}"
    text = kept_source(spec, win.source, batch_id)
    models: dict[str, _Tally] = {}
    for c in cands:
        m = models.setdefault(c.alias, _Tally(c.alias))
        j = judged[c.hash]
        m.candidates += 1
        m.compiled += j.status != "compile-error"
        if j.cases_run:
            m.best = max(m.best or 0, j.cases_passed)
    n_pass = sum(1 for c in cands if judged[c.hash].status == "passed")
    # the record: a JSON document, written once (bench.provenance.Record reads it back)
    spec_doc: dict[str, object] = {"document": spec.document, "section": spec.section,
                                   "title": spec.title, "source": spec.source}
    record: dict[str, object] = {
        "format": 1, "function": spec.function,
        "spec": spec_doc,
        "signature": signature,
        "batch": {"id": batch_id, "models": [m.to_json() for m in models.values()],
                  "rounds": len(rounds),
                  "escalated": any(r.escalated for r in rounds), "candidates": len(cands),
                  "unique": len({c.hash for c in cands}),
                  "compiled": sum(1 for c in cands if judged[c.hash].status != "compile-error"),
                  "best": win.cases_passed, **pass_at(len(cands), n_pass), "date": now()},
        "verification": {"corpus": corpus_dir.name, "cases_passed": win.cases_passed,
                         "cases_run": win.cases_run},
    }
    if inputs is not None:
        given = inputs.get("spec")
        record = {**record, **inputs, "format": 2,
                  "spec": {**spec_doc, **(given if isinstance(given, Mapping) else {})}}
    if prov_path.is_file():
        old = jsonfile.load(prov_path, "provenance record")
        old_batch = old.get("batch") if isinstance(old, dict) else None
        old_id = old_batch.get("id") if isinstance(old_batch, dict) else None
        if supersede and old_id != batch_id:
            old_spec = old.get("spec") if isinstance(old.get("spec"), dict) else {}
            record["supersedes"] = {"batch": old_id, "spec_sha256": old_spec.get("text_sha256")}
        elif not is_placeholder(old):
            (run_dir / f"{spec.function}.rs").write_text(text, encoding="utf-8")
            (run_dir / f"{spec.function}{PROVENANCE_SUFFIX}").write_text(json.dumps(record, indent=2) + "\n")
            raise NevError(f"{prov_path} records batch {old['batch'].get('id')} and is never rewritten; the passing "
                           f"version is in {run_dir}; retire the old function by hand to take it", 1)
    src_path.write_text(text, encoding="utf-8")
    prov_path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    old_floor = load_floor(floor_path)
    new = Floor(win.cases_passed, win.cases_run)
    if old_floor is None or old_floor.cases_passed <= new.cases_passed:
        write_floor(floor_path, new)
    return src_path
