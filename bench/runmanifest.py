"""A run's manifest: every input of `nev batch run` pinned before its first draw, written once and
never rewritten; the kept version's provenance record names it by its SHA-256.

- the spec section's text: `spec.text_sha256` (and its `file`); checked again from the tree's
  spec file, hashed as the prompt carries it;
- the prompt's shared prefix (system text, spec, signature, interfaces): `prompt.prefix_sha256`;
  rebuilt from the tree;
- each alias the run may draw from: `aliases[]`, its role, n and in-flight, and the model id the
  gateway names for it: the deployment the alias is served by (`openai/<the pool's served
  model>`), from the gateway's model list, else from the answer to a probe (see `probe`); read
  again;
- the corpus: `corpus` (name, key, the browsers' versions, cases); read again from its manifest;
- the engine: `engine.commit`, HEAD of the repository holding it; read again;
- nev: `nev.version` and `nev.key` (the install's key, or the digest of a checkout's sources, the
  key `nev lane install` would give it); this nev's;
- taken from the manifest, not checked: `seeds.base` (every call's seed derives from it) and `run`
  (`--models`, `--escalate`, `--max-batches`, `--escalate-after`).

The manifest holds nothing of one run alone (no batch id, no time): drawing again from it writes
the same bytes, so both runs' records name the same hash. An alias the gateway names no model for
is pinned with a null model id (its draw fails as it would have).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from bench.gateway_http import Endpoint, Unreachable, get_api, post_json
from bench.provenance import CorpusBlock, SpecBlock
from lanes.base import jsonfile
from lanes.base.errors import ConfigError

FORMAT = 1
NAME = "manifest.json"
PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class PinnedAlias:
    """An alias the run may draw from, its role, n and in-flight, and the model the gateway
    named."""

    alias: str
    role: str | None = None
    n: int | None = None
    inflight: int | None = None
    model_id: str | None = None
    fingerprint: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"alias": self.alias, "role": self.role, "n": self.n, "inflight": self.inflight,
                "model_id": self.model_id, "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class RunOptions:
    """`run`: the options a run was given (`--models`, `--escalate`, `--max-batches`,
    `--escalate-after`)."""

    models: str | None = None
    escalate: str | None = None
    max_batches: int | None = None
    escalate_after: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"models": self.models, "escalate": self.escalate, "max_batches": self.max_batches,
                "escalate_after": self.escalate_after}


@dataclass(frozen=True)
class RunManifest:
    """Every input of a run, pinned (see the module's text)."""

    function: str
    seed_base: str
    spec_file: str | None = None
    spec_text_sha256: str | None = None
    prefix_sha256: str | None = None
    aliases: tuple[PinnedAlias, ...] = ()
    corpus_name: str | None = None
    corpus_key: str | None = None
    corpus_engines: dict[str, str] | None = None      # browser -> version
    corpus_cases: int | None = None
    run: RunOptions = field(default_factory=RunOptions)
    engine_commit: str | None = None
    nev_version: str | None = None
    nev_key: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "function": self.function,
            "spec": {"file": self.spec_file, "text_sha256": self.spec_text_sha256},
            "prompt": {"prefix_sha256": self.prefix_sha256},
            "aliases": [a.to_json() for a in self.aliases],
            "corpus": {"name": self.corpus_name, "key": self.corpus_key,
                       "engines": (None if self.corpus_engines is None
                                   else dict(self.corpus_engines)),
                       "cases": self.corpus_cases},
            "seeds": {"base": self.seed_base},
            "run": self.run.to_json(),
            "engine": {"commit": self.engine_commit},
            "nev": {"version": self.nev_version, "key": self.nev_key},
        }

    @classmethod
    def from_json(cls, f: jsonfile.Fields, data: object) -> RunManifest:
        """ConfigError naming the field when one is not what nev writes (null: not known)."""
        o = f.obj(data, "(manifest)")
        if o.get("format") != FORMAT:
            raise f.fail(
                "format", f"is {o.get('format')!r}, not {FORMAT}: not a run manifest of this nev"
            )
        function: str = f.get(o, "function", str, "")
        blocks: dict[str, dict] = {
            key: f.get(o, key, dict, "")
            for key in ("spec", "prompt", "corpus", "seeds", "run", "engine", "nev")}
        seed_base: str = f.get(blocks["seeds"], "base", str, "seeds")
        aliases = []
        for i, a in enumerate(f.get(o, "aliases", list, "")):
            w = f"aliases[{i}]"
            x = f.obj(a, w)
            aliases.append(PinnedAlias(
                f.get(x, "alias", str, w), _opt(f, x, "role", str, w), _opt(f, x, "n", int, w),
                _opt(f, x, "inflight", int, w), _opt(f, x, "model_id", str, w),
                _opt(f, x, "fingerprint", str, w)))
        spec, corpus, run = blocks["spec"], blocks["corpus"], blocks["run"]
        engines = _opt(f, corpus, "engines", dict, "corpus")
        for k, v in (engines or {}).items():
            if not isinstance(v, str):
                raise f.fail(f"corpus.engines.{k}", "must be a version (text)")
        return cls(
            function=function, seed_base=seed_base,
            spec_file=_opt(f, spec, "file", str, "spec"),
            spec_text_sha256=_opt(f, spec, "text_sha256", str, "spec"),
            prefix_sha256=_opt(f, blocks["prompt"], "prefix_sha256", str, "prompt"),
            aliases=tuple(aliases),
            corpus_name=_opt(f, corpus, "name", str, "corpus"),
            corpus_key=_opt(f, corpus, "key", str, "corpus"),
            corpus_engines=engines, corpus_cases=_opt(f, corpus, "cases", int, "corpus"),
            run=RunOptions(_opt(f, run, "models", str, "run"), _opt(f, run, "escalate", str, "run"),
                           _opt(f, run, "max_batches", int, "run"),
                           _opt(f, run, "escalate_after", int, "run")),
            engine_commit=_opt(f, blocks["engine"], "commit", str, "engine"),
            nev_version=_opt(f, blocks["nev"], "version", str, "nev"),
            nev_key=_opt(f, blocks["nev"], "key", str, "nev"))


_T = TypeVar("_T")


def _opt(f: jsonfile.Fields, o: dict, key: str, kind: type[_T], where: str) -> _T | None:
    v: _T | None = f.get(o, key, kind, where, required=False)
    return v


def build(
    *,
    function: str,
    spec: SpecBlock,
    prefix_sha256: str,
    aliases: Iterable[PinnedAlias],
    served: Mapping[str, Mapping[str, str | None]],
    corpus: CorpusBlock,
    seed_base: str,
    run: RunOptions,
    engine_commit: str | None,
    nev: Mapping[str, str | None],
) -> RunManifest:
    """The manifest (pure): `aliases` (alias, role, n, inflight); `served` what the probe read."""
    return RunManifest(
        function=function, seed_base=seed_base, spec_file=spec.file,
        spec_text_sha256=spec.text_sha256, prefix_sha256=prefix_sha256,
        aliases=tuple(replace(a, model_id=(served.get(a.alias) or {}).get("model_id"),
                              fingerprint=(served.get(a.alias) or {}).get("fingerprint"))
                      for a in aliases),
        corpus_name=corpus.name, corpus_key=corpus.key, corpus_engines=dict(corpus.engines),
        corpus_cases=corpus.cases, run=run, engine_commit=engine_commit,
        nev_version=nev.get("version"), nev_key=nev.get("key"))


def text(manifest: RunManifest) -> bytes:
    """The manifest's bytes: canonical JSON (sorted keys), so the same inputs hash the same."""
    return (json.dumps(manifest.to_json(), sort_keys=True, indent=2) + "\n").encode()


def digest(manifest: RunManifest) -> str:
    return hashlib.sha256(text(manifest)).hexdigest()


def _short(v: object) -> str:
    return "none" if v is None else (v[:16] if isinstance(v, str) and len(v) == 64 else str(v))


def difference(pinned: RunManifest, now: RunManifest) -> str | None:
    """The first input the pinned manifest holds that no longer holds now, in one phrase (pure);
    None when every checked input is as pinned."""
    short = _short
    for was, then, what in (
        (pinned.spec_text_sha256, now.spec_text_sha256, "the spec text"),
        (pinned.prefix_sha256, now.prefix_sha256, "the prompt's shared prefix"),
    ):
        if was != then:
            return f"{what} changed (sha256 {short(was)} pinned, {short(then)} now)"
    served = {a.alias: a for a in now.aliases}
    for a in pinned.aliases:
        got = served.get(a.alias)
        model_now = got.model_id if got else None
        if a.model_id != model_now:
            return (
                f"alias {a.alias} now serves model {short(model_now)}, "
                f"the manifest pinned {short(a.model_id)}"
            )
    if pinned.corpus_key != now.corpus_key:
        return (
            f"the corpus {pinned.corpus_name} changed (key "
            f"{short(pinned.corpus_key)} pinned, {short(now.corpus_key)} now)"
        )
    if pinned.corpus_engines != now.corpus_engines:
        return f"the browsers changed ({pinned.corpus_engines} pinned, {now.corpus_engines} now)"
    if pinned.engine_commit != now.engine_commit:
        return (
            f"the engine's commit changed ({short(pinned.engine_commit)} pinned, "
            f"{short(now.engine_commit)} now)"
        )
    for key, was, then in (("version", pinned.nev_version, now.nev_version),
                           ("key", pinned.nev_key, now.nev_key)):
        if was != then:
            return f"nev changed ({key} {was} pinned, {then} now)"
    return None


# ---- the edge ----


def write(path: Path, manifest: RunManifest) -> str:
    """Write the manifest once (never over a file: an existing one with other bytes is refused),
    read-only; its SHA-256."""
    data = text(manifest)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    except FileExistsError:
        if path.read_bytes() != data:
            raise ConfigError(
                f"{path}: a run manifest with other inputs is already there; "
                "a manifest is never rewritten"
            ) from None
        return hashlib.sha256(data).hexdigest()
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return hashlib.sha256(data).hexdigest()


def load(path: Path) -> RunManifest:
    """A manifest to draw again from; ConfigError naming the file and the field otherwise."""
    return RunManifest.from_json(jsonfile.Fields(path), jsonfile.load(path, "run manifest"))


#: where the gateway says which deployment serves each alias (LiteLLM's model list: per alias its
#: `litellm_params.model`, `openai/<the pool's served model>`), and the header its answer to a
#: completion names it in (the answer's own `model` is only the alias asked for)
MODEL_INFO = "/v1/model/info"
MODEL_HEADER = "x-litellm-model-name"


def deployments(data: object) -> dict[str, str]:
    """Alias -> the model its deployments are served from, from `/v1/model/info`'s answer (pure;
    several deployments of one alias: their models sorted and joined by `,`). Nothing else of the
    answer is read: it also names the pools' addresses."""
    seen: dict[str, set[str]] = {}
    rows = data.get("data") if isinstance(data, dict) else None
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or not isinstance(row.get("model_name"), str):
            continue
        params = row.get("litellm_params")
        model = params.get("model") if isinstance(params, dict) else None
        if isinstance(model, str) and model:
            seen.setdefault(row["model_name"], set()).add(model)
    return {a: ",".join(sorted(ms)) for a, ms in seen.items()}


def probe(ep: Endpoint, aliases: Iterable[str]) -> dict[str, dict[str, str | None]]:
    """Per alias, the model id the gateway names: from its model list (`MODEL_INFO`, no call to a
    pool); an alias it does not list (or a gateway that does not answer the route) is asked one
    completion of `max_tokens` 1, as `nev rig probe` sends, whose `x-litellm-model-name` header
    (else its `model`) names it and whose `system_fingerprint` is kept. Null for an alias that
    answered neither."""
    try:
        r = get_api(ep, MODEL_INFO, (min(5.0, PROBE_TIMEOUT_S), PROBE_TIMEOUT_S))
        listed = deployments(r.json()) if r.status == 200 else {}
    except (Unreachable, ValueError):
        listed = {}
    out: dict[str, dict[str, str | None]] = {}
    for alias in dict.fromkeys(aliases):
        if alias in listed:
            out[alias] = {"model_id": listed[alias], "fingerprint": None}
            continue
        model = fp = None
        try:
            c = post_json(
                ep,
                {
                    "model": alias,
                    "max_tokens": 1,
                    "temperature": 0,
                    "messages": [{"role": "user", "content": "Reply with one word."}],
                },
                (min(5.0, PROBE_TIMEOUT_S), PROBE_TIMEOUT_S),
            )
            body = c.json() if c.status == 200 else None
        except (Unreachable, ValueError):
            body = None
        if isinstance(body, dict):
            named = c.headers.get(MODEL_HEADER) if c.headers is not None else None
            m, f = named or body.get("model"), body.get("system_fingerprint")
            model = m if isinstance(m, str) and m else None
            fp = f if isinstance(f, str) and f else None
        out[alias] = {"model_id": model, "fingerprint": fp}
    return out


def nev_version() -> dict[str, str | None]:
    """This nev: its package version and its key (the install's, on a lane; a checkout's sources'
    digest, the key `nev lane install` would give it)."""
    from importlib import metadata

    from lanes import selfinstall

    try:
        version: str | None = metadata.version("nev")
    except metadata.PackageNotFoundError:
        version = None
    prefix = Path(sys.prefix)
    if prefix.parent.name == "installs":
        key: str | None = prefix.name
    else:
        key = selfinstall.source_key() if selfinstall.from_checkout() else None
    return {"version": version, "key": key}
