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
from pathlib import Path
from typing import Any

from bench.gateway_http import Endpoint, Unreachable, get_api, post_json
from lanes.base import jsonfile
from lanes.base.errors import ConfigError

FORMAT = 1
NAME = "manifest.json"
PROBE_TIMEOUT_S = 60.0


def build(
    *,
    function: str,
    spec: Mapping[str, Any],
    prefix_sha256: str,
    aliases: Iterable[Mapping[str, Any]],
    served: Mapping[str, Mapping[str, str | None]],
    corpus: Mapping[str, Any],
    seed_base: str,
    run: Mapping[str, Any],
    engine_commit: str | None,
    nev: Mapping[str, str | None],
) -> dict[str, Any]:
    """The manifest (pure): `aliases` {alias, role, n, inflight}; `served` what the probe read."""
    return {
        "format": FORMAT,
        "function": function,
        "spec": {"file": spec.get("file"), "text_sha256": spec.get("text_sha256")},
        "prompt": {"prefix_sha256": prefix_sha256},
        "aliases": [
            {
                **dict(a),
                "model_id": (served.get(str(a["alias"])) or {}).get("model_id"),
                "fingerprint": (served.get(str(a["alias"])) or {}).get("fingerprint"),
            }
            for a in aliases
        ],
        "corpus": {k: corpus.get(k) for k in ("name", "key", "engines", "cases")},
        "seeds": {"base": seed_base},
        "run": dict(run),
        "engine": {"commit": engine_commit},
        "nev": dict(nev),
    }


def text(manifest: Mapping[str, Any]) -> bytes:
    """The manifest's bytes: canonical JSON (sorted keys), so the same inputs hash the same."""
    return (json.dumps(manifest, sort_keys=True, indent=2) + "\n").encode()


def digest(manifest: Mapping[str, Any]) -> str:
    return hashlib.sha256(text(manifest)).hexdigest()


def difference(pinned: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """The first input the pinned manifest holds that no longer holds now, in one phrase (pure);
    None when every checked input is as pinned."""

    def at(m: Mapping[str, Any], path: str) -> Any:
        v: Any = m
        for part in path.split("."):
            v = v.get(part) if isinstance(v, Mapping) else None
        return v

    def short(v: Any) -> str:
        return "none" if v is None else (v[:16] if isinstance(v, str) and len(v) == 64 else str(v))

    for path, what in (
        ("spec.text_sha256", "the spec text"),
        ("prompt.prefix_sha256", "the prompt's shared prefix"),
    ):
        if at(pinned, path) != at(now, path):
            return (
                f"{what} changed (sha256 {short(at(pinned, path))} pinned, "
                f"{short(at(now, path))} now)"
            )
    served = {a.get("alias"): a for a in now.get("aliases") or []}
    for a in pinned.get("aliases") or []:
        got = served.get(a.get("alias")) or {}
        if a.get("model_id") != got.get("model_id"):
            return (
                f"alias {a.get('alias')} now serves model {short(got.get('model_id'))}, "
                f"the manifest pinned {short(a.get('model_id'))}"
            )
    if at(pinned, "corpus.key") != at(now, "corpus.key"):
        return (
            f"the corpus {at(pinned, 'corpus.name')} changed (key "
            f"{short(at(pinned, 'corpus.key'))} pinned, {short(at(now, 'corpus.key'))} now)"
        )
    if at(pinned, "corpus.engines") != at(now, "corpus.engines"):
        return (
            f"the browsers changed ({at(pinned, 'corpus.engines')} pinned, "
            f"{at(now, 'corpus.engines')} now)"
        )
    if at(pinned, "engine.commit") != at(now, "engine.commit"):
        return (
            f"the engine's commit changed ({short(at(pinned, 'engine.commit'))} pinned, "
            f"{short(at(now, 'engine.commit'))} now)"
        )
    for key in ("version", "key"):
        if at(pinned, f"nev.{key}") != at(now, f"nev.{key}"):
            return (
                f"nev changed ({key} {at(pinned, f'nev.{key}')} pinned, "
                f"{at(now, f'nev.{key}')} now)"
            )
    return None


# ---- the edge ----


def write(path: Path, manifest: Mapping[str, Any]) -> str:
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


def load(path: Path) -> dict[str, Any]:
    """A manifest to draw again from; ConfigError naming the file and the field otherwise."""
    data = jsonfile.load(path, "run manifest")
    f = jsonfile.Fields(path)
    o = f.obj(data, "(manifest)")
    if o.get("format") != FORMAT:
        raise f.fail(
            "format", f"is {o.get('format')!r}, not {FORMAT}: not a run manifest of this nev"
        )
    f.get(o, "function", str, "")
    for key in ("spec", "prompt", "corpus", "seeds", "run", "engine", "nev"):
        f.get(o, key, dict, "")
    f.get(o["seeds"], "base", str, "seeds")
    for i, a in enumerate(f.get(o, "aliases", list, "")):
        f.get(f.obj(a, f"aliases[{i}]"), "alias", str, f"aliases[{i}]")
    return o


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
