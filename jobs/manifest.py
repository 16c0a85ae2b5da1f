"""A job's manifest (YAML): what it is, what it serves and its ordered stages.

```yaml
name: clamp-px            # [a-z0-9][a-z0-9._-]*, at most 60: it names job/<name> and result/<name>
base: 3f1c2a9...          # the commit the job starts from (7-40 hex digits)
spec: specs/clamp-px.md   # the spec it serves
key: batch                # the gateway key name its models are used with (optional)
limit: 2h                 # wall-clock limit across resumes: seconds, or 90s / 30m / 2h
budget:                   # optional: what its batch stages may spend together, across resumes
  tokens: 200000          #   prompt + completion tokens (the gateway's usage)
  gpu_s: 3600             #   pool GPU-seconds, estimated from `nev rig throughput`
stages:
  - name: gen
    kind: batch           # command | verify | batch | writer
    command: nev batch run --models qwen3.8-27b-fast:4:2
    models: [qwen3.8-27b-fast]          # alias names or {alias, provider}
    providers: [self-hosted]
  - name: check
    kind: verify          # without a command: tracks.json's verify
  - name: write
    kind: writer
    model: qwen3.8-27b-fast
    brief: briefs/clamp-px.md           # in the job's tree; copied outside the worktree to run
```

Every problem is one line naming the file and the field (`stages[1].kind`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lanes.base import jsonfile, yamlfile
from lanes.base.errors import ConfigError
from lanes.base.gitrun import ref_problem
from lanes.base.jsonfile import Fields

KINDS = ("command", "verify", "batch", "writer")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,59}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{7,40}$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|min|h)?$")
# A stage whose command runs these goes through the lane gate or the verify: it needs NEV_ON_LANE.
_GATE_CALL = re.compile(r"(?:^|[\s;&|(])nev\s+(?:lane\s+(?:run|on)|verify)\b")
DEFAULT_LIMIT_S = 4 * 3600


@dataclass(frozen=True)
class Model:
    alias: str
    provider: str | None = None


@dataclass(frozen=True)
class Stage:
    name: str
    kind: str
    command: str | None
    models: tuple[Model, ...] = ()
    providers: tuple[str, ...] = ()
    brief: str | None = None
    model: str | None = None

    def calls_model(self) -> bool:
        return bool(self.models or self.providers or self.model) or self.kind in ("batch", "writer")

    def calls_gate(self) -> bool:
        return self.kind == "verify" or bool(self.command and _GATE_CALL.search(self.command))

    def digest(self) -> str:
        """The hash of the stage's definition: an input of every transition it makes."""
        data = {"name": self.name, "kind": self.kind, "command": self.command,
                "models": [[m.alias, m.provider] for m in self.models],
                "providers": list(self.providers), "brief": self.brief, "model": self.model}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Manifest:
    path: Path
    name: str
    base: str
    spec: str
    limit_s: float
    stages: tuple[Stage, ...]
    key: str | None = None
    models: tuple[Model, ...] = ()
    digest: str = ""
    budget_tokens: int | None = None
    budget_gpu_s: float | None = None
    # the manifest's YAML as the user wrote it (its digest is the run's), passed through
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def has_writer(self) -> bool:
        return any(s.kind == "writer" for s in self.stages)

    def calls_model(self) -> bool:
        return bool(self.models) or any(s.calls_model() for s in self.stages)

    def calls_gate(self) -> bool:
        return any(s.calls_gate() for s in self.stages)

    @property
    def spec_name(self) -> str:
        """The track the job serves: `specs/clamp-px.md` and `clamp-px` both name `clamp-px`."""
        return Path(self.spec).name.removesuffix(".md")

    def needs_inventory(self) -> bool:
        return bool(self.models) or any(s.models or s.providers or s.model for s in self.stages)

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)


def parse_duration(value: Any) -> float | None:
    """Seconds from 3600, "3600", "90s", "30m", "2h"; None when it is not a duration."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    m = _DURATION.match(value.strip())
    if not m:
        return None
    n = float(m.group(1))
    return n * {"s": 1, None: 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]


def _models(f: Fields, obj: dict, field: str) -> tuple[Model, ...]:
    raw = f.get(obj, "models", list, field, required=False, default=[])
    out: list[Model] = []
    for i, item in enumerate(raw):
        here = f"{field}.models[{i}]" if field else f"models[{i}]"
        if isinstance(item, str) and item.strip():
            out.append(Model(item))
        elif isinstance(item, dict):
            out.append(Model(f.get(item, "alias", str, here), f.get(item, "provider", str, here, required=False)))
        else:
            raise f.fail(here, "must be an alias name or {alias, provider}")
    return tuple(out)


TOP_FIELDS = {"name", "base", "spec", "key", "limit", "budget", "models", "providers", "stages"}
BUDGET_FIELDS = {"tokens", "gpu_s"}


def _budget(f: Fields, top: dict) -> tuple[int | None, float | None]:
    """`budget: {tokens, gpu_s}`, each optional and positive."""
    if top.get("budget") is None:
        return None, None
    b = f.get(top, "budget", dict, "")
    _only_known(f, b, BUDGET_FIELDS, "budget", "a budget field")
    if not b:
        raise f.fail("budget", "is empty; give tokens and/or gpu_s, or leave budget out")
    tokens = f.get(b, "tokens", int, "budget", required=False)
    if tokens is not None and tokens < 1:
        raise f.fail("budget.tokens", f"{tokens} must be a positive number of tokens")
    gpu = f.get(b, "gpu_s", (int, float), "budget", required=False)
    if gpu is not None and not gpu > 0:
        raise f.fail("budget.gpu_s", f"{gpu} must be a positive number of GPU-seconds")
    return tokens, None if gpu is None else float(gpu)
STAGE_FIELDS = {"name", "kind", "command", "models", "providers", "brief", "model"}


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a job (it names job/NAME, result/NAME and a state folder), or None
    (pure): NAME_RE, then git's ref rules (`a..b`, `x.lock`, `x.` pass NAME_RE)."""
    if not NAME_RE.match(name):
        return "must be 1-60 of a-z 0-9 . _ - starting with a letter or digit"
    return ref_problem(name)


def parse(data: Any, where: Path | str) -> Manifest:
    """Validate a manifest's data; every problem names the field."""
    f = Fields(where)
    top = f.obj(data, "(top level)")
    _only_known(f, top, TOP_FIELDS, "", "a manifest field")
    name = f.get(top, "name", str, "")
    if not NAME_RE.match(name):
        raise f.fail("name", f"{name!r} must be 1-60 of a-z 0-9 . _ - starting with a letter or digit")
    why = name_problem(name)
    if why:
        raise f.fail("name", f"{name!r} {why}; it names the branches job/NAME and result/NAME")
    base = f.get(top, "base", str, "")
    if not COMMIT_RE.match(base):
        raise f.fail("base", f"{base!r} must be a commit id (7-40 lower-case hex digits)")
    spec = f.get(top, "spec", str, "")
    if not spec.strip():
        raise f.fail("spec", "is empty; name the spec the job serves")
    key = f.get(top, "key", str, "", required=False)
    limit_raw = top.get("limit", DEFAULT_LIMIT_S)
    limit = parse_duration(limit_raw)
    if limit is None or limit <= 0:
        raise f.fail("limit", f"{limit_raw!r} must be a positive duration (seconds, or 90s / 30m / 2h)")
    budget_tokens, budget_gpu_s = _budget(f, top)
    models = _models(f, top, "")
    if top.get("providers") is not None:
        f.str_list(top, "providers", "")
    stages_raw = f.get(top, "stages", list, "")
    if not stages_raw:
        raise f.fail("stages", "is empty; list at least one stage")
    seen: set[str] = set()
    stages = tuple(_stage(f, st, f"stages[{i}]", seen) for i, st in enumerate(stages_raw))
    digest = hashlib.sha256(json.dumps(top, sort_keys=True, default=str).encode()).hexdigest()
    return Manifest(Path(where), name, base, spec, limit, stages, key, models, digest, budget_tokens, budget_gpu_s,
                    top)


def _only_known(f: Fields, obj: dict, known: set[str], here: str, what: str) -> None:
    for k in obj:
        if k not in known:
            raise f.fail(f"{here}.{k}" if here else str(k), f"is not {what} (known: {', '.join(sorted(known))})")


def _stage(f: Fields, raw: Any, here: str, seen: set[str]) -> Stage:
    """One stage; `seen` holds the names of the stages before it (and gets this one's)."""
    st = f.obj(raw, here)
    _only_known(f, st, STAGE_FIELDS, here, "a stage field")
    sname = f.get(st, "name", str, here)
    if not NAME_RE.match(sname):
        raise f.fail(f"{here}.name", f"{sname!r} must be 1-60 of a-z 0-9 . _ -")
    if sname in seen:
        raise f.fail(f"{here}.name", f"{sname!r} is used by an earlier stage; stage names are unique")
    seen.add(sname)
    kind = f.get(st, "kind", str, here)
    if kind not in KINDS:
        raise f.fail(f"{here}.kind", f"{kind!r} must be one of {', '.join(KINDS)}")
    command = f.get(st, "command", str, here, required=False)
    if command is not None and not command.strip():
        raise f.fail(f"{here}.command", "is empty")
    if kind in ("command", "batch") and command is None:
        raise f.fail(f"{here}.command", f"is missing; a {kind} stage runs a command")
    brief = f.get(st, "brief", str, here, required=False)
    model = f.get(st, "model", str, here, required=False)
    _check_writer_fields(f, here, kind, command, brief, model)
    smodels = _models(f, st, here)
    if model is not None and not any(m.alias == model for m in smodels):
        smodels = (*smodels, Model(model))
    return Stage(sname, kind, command, smodels, tuple(f.str_list(st, "providers", here)), brief, model)


def _check_writer_fields(f: Fields, here: str, kind: str, command: str | None, brief: str | None,
                         model: str | None) -> None:
    """A writer stage has a brief and a model and no command; no other stage has a brief or a model."""
    if kind == "writer":
        if command is not None:
            raise f.fail(f"{here}.command", "is not allowed on a writer stage: the harness is a declaration "
                         "(tracks.json specWatch.lanes.tool); give brief and model")
        if brief is None:
            raise f.fail(f"{here}.brief", "is missing; a writer stage needs its brief file")
        if model is None:
            raise f.fail(f"{here}.model", "is missing; a writer stage needs the model alias it writes with")
    elif brief is not None or model is not None:
        raise f.fail(f"{here}.{'brief' if brief is not None else 'model'}", "is only for writer stages")


def load(path: Path) -> Manifest:
    return parse(read(path), path)


def read(path: Path) -> object:
    """The manifest file's YAML, or one line naming the file and what is wrong with it."""
    text = jsonfile.read_text(path, "manifest", "give the job's manifest file")
    # strict and bounded: duplicate keys and alias bombs refused before any walk (lanes/base/yamlfile.py)
    data = yamlfile.load(text, str(path), "manifest")
    problem = jsonfile.shape_problem(data)
    if problem:
        raise ConfigError(f"{path}: the manifest {problem}; fix the file")
    return data
