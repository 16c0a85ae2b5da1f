"""`nev rig drift --fix`: the gateway's model list regenerated from bench/folknet.json and put in
place through the snapshot/restore path.

    alias in the gateway's model list   in the declaration     after the fix
    yes                                 active                 kept as it is
    yes                                 retired / undeclared   removed
    no                                  active                 added: a copy of an entry of the same
                                                               pool or serving role, `model` renamed
    no                                  active, nothing to copy  left out, named (exit 1)

Steps: read the gateway role's config from each of its hosts, generate the new one (`regenerate`,
pure), snapshot the role (`before-drift-fix-TIME`, the undo), then as a restore does it: the new
file beside the old one, the role's validate on it, an atomic rename, the role's reload (on the
box the gateway's unit restarts LiteLLM), the health check; on any failure the old file goes back,
reload and health check again, and the message names the step. The gateway role's `keys_file`
(per-key allowlists) is regenerated the same way when it is also one of the role's files (so the
snapshot holds it): each key may use the active aliases that grant it; a job's own key (an entry
with `job`) is left as it is. HAProxy's limits are not fixed here.

Each kept or added entry gets the alias's declared limits (`bench.folknet.gateway_limits`:
`max_parallel_requests` always, `rpm`/`tpm` as declared, removed when not), and `router_settings`
gets what LiteLLM needs to enforce them (`ROUTER_LIMIT_SETTINGS`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.folknet import LIMIT_FIELDS, ROUTER_LIMIT_SETTINGS, Folknet, alias_limits
from lanes.base import jsonfile, yamlfile
from lanes.base.errors import ConfigError, NevError
from rig.rigfile import RigFile, Role
from rig.serving.declared import ServingRole
from rig.serving.drift import parse_keys
from rig.snapshot import changelog
from rig.snapshot.capture import FileRec, HostState, capture_host, sha256
from rig.snapshot.hosts import Hosts
from rig.snapshot.restore import RestoreFailed, restore_role


class FixFailed(NevError):
    pass


# The gateway's config (its YAML) and the keys file (JSON) are documents nev rewrites in part: the
# fields named here are read with checks, every other one passes through as read.


@dataclass
class Regenerated:
    config: dict[str, object]
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    unfixable: list[str] = field(default_factory=list)   # declared, not served, no entry to copy
    limited: list[str] = field(default_factory=list)     # one line per entry or setting whose limits changed

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.added or self.limited)


def regenerate_keys(keys: dict[str, object], declared: Folknet) -> tuple[dict[str, object], list[str]]:
    """The keys file with each key's `models` as the declaration grants them; one line per change."""
    out, changes = copy.deepcopy(keys), []
    for k, entry in out.items():
        if not isinstance(entry, dict):
            raise FixFailed(f"the keys file's entry {k!r} is not an object; fix the keys file")
        if entry.get("job"):
            continue
        name = str(entry["name"])
        granted = [a.name for a in declared.active() if name in a.keys]
        had = [str(m) for m in entry.get("models", [])]
        now = [m for m in had if m in granted] + sorted(set(granted) - set(had))
        if now != had:
            entry["models"] = now
            gone, new = sorted(set(had) - set(now)), sorted(set(now) - set(had))
            changes.append(f"key {name}: " + "; ".join(
                ([f"no more {', '.join(gone)}"] if gone else []) + ([f"now {', '.join(new)}"] if new else [])))
    return out, changes


def _siblings(alias: str, declared: Folknet, serving: dict[str, ServingRole]) -> set[str]:
    """Aliases served the same way: the same pool in the declaration, or the same serving role."""
    pool = declared.aliases[alias].pool
    out = {a.name for a in declared.aliases.values() if a.pool == pool}
    for ro in serving.values():
        if alias in ro.aliases or ro.name == pool:
            out |= set(ro.aliases)
    return out - {alias}


def _renamed(entry: dict[str, object], alias: str) -> dict[str, object]:
    new = copy.deepcopy(entry)
    new["model_name"] = alias
    params = new.get("litellm_params")
    if isinstance(params, dict) and isinstance(params.get("model"), str):
        prefix, sep, _ = params["model"].rpartition("/")
        params["model"] = f"{prefix}{sep}{alias}"
    return new


def regenerate(config: dict[str, object], declared: Folknet,
               serving: dict[str, ServingRole]) -> Regenerated:
    """The gateway config with its model list as declared (the table in the module docstring)."""
    entries = config.get("model_list")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "model_name" in e for e in entries):
        raise FixFailed("the gateway's config has no model_list of {model_name, litellm_params} entries")
    active = {a.name for a in declared.active()}
    out = Regenerated(config=copy.deepcopy(config))
    kept = []
    for e in entries:
        name = str(e["model_name"])
        if name in active:
            kept.append(e)
        elif name not in out.removed:
            out.removed.append(name)
    served = {str(e["model_name"]) for e in entries}
    for a in sorted(active - served):
        sib = next((e for e in entries if e["model_name"] in _siblings(a, declared, serving)), None)
        if sib is None:
            out.unfixable.append(a)
            continue
        kept.append(_renamed(sib, a))
        out.added.append(a)
    out.config["model_list"] = kept
    _set_limits(out, declared)
    return out


def _set_limits(out: Regenerated, declared: Folknet) -> None:
    """Each entry's limits and the router's settings as declared; a line per change."""
    entries = out.config["model_list"]
    for e in entries if isinstance(entries, list) else []:
        a = declared.aliases.get(str(e["model_name"]))
        params = e.setdefault("litellm_params", {})
        if a is None or not isinstance(params, dict):
            continue
        want = alias_limits(a)
        had = {k: params[k] for k in LIMIT_FIELDS if k in params}
        if had != want:
            for k in LIMIT_FIELDS:
                params.pop(k, None)
            params.update(want)
            out.limited.append(f"{a.name}: " + ", ".join(
                f"{k} {had.get(k, 'none')} -> {want.get(k, 'none')}" for k in LIMIT_FIELDS if had.get(k) != want.get(k)))
    rs = out.config.get("router_settings")
    rs = rs if isinstance(rs, dict) else {}
    for k, v in ROUTER_LIMIT_SETTINGS.items():
        if rs.get(k) != v:
            out.limited.append(f"router_settings.{k}: {rs.get(k, 'unset')} -> {v}")
            rs[k] = v
    out.config["router_settings"] = rs


def gateway_role(rig: RigFile) -> Role:
    """The role whose host runs the gateway: the one with a keys file, else the one named gateway."""
    role = next((r for r in rig.roles.values() if r.keys_file), None) or rig.roles.get("gateway")
    if role is None or not role.files:
        raise FixFailed(f"{rig.path} has no gateway role with its config as first file (a role with "
                        "`keys_file`, or one named gateway)")
    return role


Render = Callable[[dict[str, object], Folknet, dict[str, ServingRole]], Regenerated]


def _dump(config: dict[str, object]) -> bytes:
    return ("# the gateway's config; model_list and limits generated from bench/folknet.json by nev rig drift --fix\n"
            + yaml.safe_dump(config, sort_keys=False)).encode()


def _read(live: HostState, path: str, host: str) -> bytes:
    rec = live.file(path)
    if rec is None or rec.missing:
        raise FixFailed(f"{path} is missing on {host}")
    return live.blobs[rec.sha256]


def _with(live: HostState, path: str, data: bytes) -> FileRec:
    """The file as it should be: the new content, owner and mode as found."""
    rec = live.file(path)
    assert rec is not None
    return FileRec(path=path, uid=rec.uid, gid=rec.gid, user=rec.user, group=rec.group, mode=rec.mode,
                   size=len(data), sha256=sha256(data))


def _wanted(hosts: Hosts, role: Role, declared: Folknet, serving: dict[str, ServingRole],
            render: Render) -> tuple[dict[str, HostState], Regenerated, list[str]]:
    """Per host, the config (and keys) file as it should be, what changes in the model list, and
    the keys' changes."""
    # the keys file only when the role's snapshot holds it: nothing changes without its undo
    path, kpath = role.files[0], role.keys_file if role.keys_file in role.files else None
    want: dict[str, HostState] = {}
    last: Regenerated | None = None
    key_changes: list[str] = []
    for host in role.hosts:
        live = capture_host(hosts.get(host), host, [path] + ([kpath] if kpath else []), [])
        raw = _read(live, path, host)
        try:
            current = yamlfile.load(raw.decode("utf-8", "replace"), f"{host}:{path}", "serving config")
        except ConfigError as e:
            raise FixFailed(e.message) from None
        last = render(current if isinstance(current, dict) else {}, declared, serving)
        data = _dump(last.config) if last.changed else raw
        st = HostState(host=host, files=[_with(live, path, data)], blobs={sha256(data): data})
        if kpath:
            kraw = _read(live, kpath, host)
            parse_keys(kraw, f"{host}:{kpath}")        # refuses a keys file of another shape (or not text)
            keys, key_changes = regenerate_keys(jsonfile.parse(kraw.decode(), f"{host}:{kpath}", "keys file"),
                                                declared)
            kdata = (json.dumps(keys, indent=2) + "\n").encode() if key_changes else kraw
            st.files.append(_with(live, kpath, kdata))
            st.blobs[sha256(kdata)] = kdata
        want[host] = st
    assert last is not None
    return want, last, key_changes


def entry(lines: list[str], result: str) -> str:
    out = [f"## {changelog.now()} drift --fix gateway", f"- who: {changelog.who()}"]
    out += [f"- {ln}" for ln in lines]
    out.append(f"- result: {result}")
    return "\n".join(out) + "\n"


def fix(rig: RigFile, declared: Folknet, notes: Path, say: Callable[[str], None],
        snapshot: Callable[[str], None], render: Render = regenerate) -> int:
    """Regenerate and put in place; 0 when the gateway's model list is as declared afterwards."""
    role = gateway_role(rig)
    lines: list[str] = []

    def tell(line: str) -> None:
        lines.append(line)
        say(f"drift --fix: {line}")

    with Hosts(rig) as hosts:
        want, gen, key_changes = _wanted(hosts, role, declared, rig.serving, render)
        for a in gen.unfixable:
            tell(f"{a}: declared but not served, and no entry of its pool to copy; add it to "
                 f"{role.files[0]} by hand")
        if not gen.changed and not key_changes:
            tell("the gateway's model list, limits and keys are already as declared; nothing replaced")
            return 1 if gen.unfixable else 0
        label = f"before-drift-fix-{changelog.now().replace(':', '').replace('-', '')}"
        tell(f"model list: remove {', '.join(gen.removed) or 'nothing'}; add {', '.join(gen.added) or 'nothing'}")
        for ln in gen.limited:
            tell(f"limits: {ln}")
        for ln in key_changes:
            tell(ln)
        snapshot(label)
        tell(f"snapshot {label} taken (the undo: nev rig restore {label} {role.name})")
        try:
            for ln in restore_role(hosts, role, label, want, dry_run=False, doing="drift --fix"):
                tell(ln)
        except RestoreFailed as e:
            changelog.append(notes, entry(lines, f"FAILED: {e.message}"))
            raise
    changelog.append(notes, entry(lines, "done" + ("; left out: " + ", ".join(gen.unfixable)
                                                  if gen.unfixable else "")))
    return 1 if gen.unfixable else 0
