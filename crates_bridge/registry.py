"""Generated functions, discovered from their provenance records.

A function `<name>` lives in `crates/layout/src/generated/` as `<name>.rs`, its
`<name>.provenance.json` (the batch that admitted it; never rewritten) and its
`<name>.floor.json` (the score floor; may be missing until the first raise).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crates_bridge.errors import BridgeError, load_json

PROVENANCE_SUFFIX = ".provenance.json"
FLOOR_SUFFIX = ".floor.json"
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Provenance:
    """The fields of a provenance record the tooling reads (the rest is kept as is)."""

    function: str
    batch: str | None
    cases_passed: int
    cases_run: int | None
    corpus: str | None
    raw: dict


@dataclass(frozen=True)
class Floor:
    cases_passed: int
    cases_run: int

    def to_json(self) -> dict[str, int]:
        return {"cases_passed": self.cases_passed, "cases_run": self.cases_run}


@dataclass(frozen=True)
class GeneratedFunction:
    name: str
    source: Path
    provenance_path: Path
    floor_path: Path
    provenance: Provenance
    floor: Floor | None


def _load_json(path: Path, what: str) -> Any:
    return load_json(path, what, "commit it with the function")


def _count(path: Path, obj: dict, key: str, field: str, required: bool) -> int | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise BridgeError(f"{path}: field {field} is missing; fix the file")
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise BridgeError(f"{path}: field {field} must be a whole number >= 0, not {v!r}; fix the file")
    return v


def parse_provenance(path: Path, data: Any, name: str) -> Provenance:
    if not isinstance(data, dict):
        raise BridgeError(f"{path}: must hold a JSON object; fix the file")
    fn = data.get("function")
    if fn != name:
        raise BridgeError(f"{path}: field function is {fn!r} but the file is named for `{name}`; fix the file")
    ver = data.get("verification")
    if not isinstance(ver, dict):
        raise BridgeError(f"{path}: field verification must be an object with cases_passed; fix the file")
    passed = _count(path, ver, "cases_passed", "verification.cases_passed", True)
    run = _count(path, ver, "cases_run", "verification.cases_run", False)
    batch = data.get("batch")
    batch_id = batch.get("id") if isinstance(batch, dict) else batch
    corpus = ver.get("corpus")
    return Provenance(name, str(batch_id) if batch_id is not None else None, passed or 0, run,
                      corpus if isinstance(corpus, str) else None, data)


def parse_floor(path: Path, data: Any) -> Floor:
    if not isinstance(data, dict):
        raise BridgeError(f"{path}: must hold a JSON object with cases_passed and cases_run; fix the file")
    passed = _count(path, data, "cases_passed", "cases_passed", True)
    run = _count(path, data, "cases_run", "cases_run", True)
    assert passed is not None and run is not None
    if passed > run:
        raise BridgeError(f"{path}: cases_passed ({passed}) is above cases_run ({run}); fix the file")
    return Floor(passed, run)


def load_floor(path: Path) -> Floor | None:
    if not os.path.lexists(path):
        return None
    return parse_floor(path, _load_json(path, "floor file"))


def discover(generated_dir: Path) -> list[GeneratedFunction]:
    """Every generated function in `generated_dir`, by name."""
    if not generated_dir.is_dir():
        raise BridgeError(f"{generated_dir}: no such folder; the engine keeps generated functions there")
    out = []
    for prov in sorted(generated_dir.glob("*" + PROVENANCE_SUFFIX)):
        name = prov.name[: -len(PROVENANCE_SUFFIX)]
        if not NAME_RE.match(name):
            raise BridgeError(f"{prov}: `{name}` is not a Rust function name (lower_snake_case); rename the file")
        source = generated_dir / f"{name}.rs"
        if not source.is_file():
            raise BridgeError(f"{prov}: no {source.name} beside it; commit the function with its record")
        floor_path = generated_dir / f"{name}{FLOOR_SUFFIX}"
        out.append(GeneratedFunction(name, source, prov, floor_path,
                                     parse_provenance(prov, _load_json(prov, "provenance record"), name),
                                     load_floor(floor_path)))
    return out


def write_floor(path: Path, floor: Floor) -> None:
    path.write_text(json.dumps(floor.to_json(), indent=2) + "\n", encoding="utf-8")
