"""`nev rig drift`: what the gateway serves, what HAProxy has up and what bench/folknet.json declares.

    difference            when
    retired-served        a retired alias is still in the gateway's model list
    undeclared-served     the gateway serves an alias the declaration does not name
    missing               a declared, active alias is not in the gateway's model list
    limit                 an alias's max_inflight differs from its server lines' maxconn (summed)
    gateway-limit         an alias's max_inflight, rpm or tpm differs from the gateway's own limit
                          for it (LiteLLM's max_parallel_requests, rpm, tpm, from /v1/model/info)
    none-up               a served alias has no server line ready in HAProxy
    key-too-much          a key may use an alias the declaration does not grant it
    key-missing           a key may not use an alias the declaration grants it

`compare` is pure; `gather` reads the three sides (the gateway with its admin key, HAProxy's
runtime API and the gateway's keys file over SSH through the jump host). A job's own key in the
keys file (an entry with `job`, `jobs/jobkeys.py`) and a rig service's (an entry with `service`,
the collector lane's probe) are not the declaration's and are not compared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bench.folknet import LIMIT_FIELDS, LIMIT_NAMES, Folknet, alias_limits
from lanes.base import jsonfile
from lanes.base.errors import NevError
from rig.rigfile import RigFile
from rig.serving.declared import ServingRole
from rig.serving.haproxy import Admin, Server
from rig.snapshot.hosts import Hosts


@dataclass(frozen=True)
class Diff:
    kind: str
    alias: str
    message: str
    key: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return asdict(self)


@dataclass(frozen=True)
class Live:
    """What the gateway and HAProxy report: served aliases, server lines, per-key allowlists
    (None when the gateway's keys are not declared in the rig file)."""

    served: list[str]
    servers: list[Server]
    keys: dict[str, list[str]] | None = None
    limits: dict[str, dict[str, int]] | None = None   # alias -> the gateway's limits for it


def _limits_side(declared: Folknet, limits: dict[str, dict[str, int]]) -> list[Diff]:
    out = []
    for a in declared.active():
        if a.name not in limits:
            continue
        want, have = alias_limits(a), limits[a.name]
        parts = [f"declared {LIMIT_NAMES[k]} {want.get(k, 'none')}, the gateway's {k} {have.get(k, 'none')}"
                 for k in LIMIT_FIELDS if want.get(k) != have.get(k)]
        if parts:
            out.append(Diff("gateway-limit", a.name, f"{a.name}: " + "; ".join(parts)))
    return out


def _declared_side(declared: Folknet, served: set[str]) -> list[Diff]:
    out = []
    for a in declared.aliases.values():
        if a.is_retired() and a.name in served:
            out.append(Diff("retired-served", a.name, f"{a.name}: retired on {a.retired} but still served by the gateway"))
        elif not a.is_retired() and a.name not in served:
            out.append(Diff("missing", a.name, f"{a.name}: declared but not served by the gateway"))
    for name in sorted(served - set(declared.aliases)):
        out.append(Diff("undeclared-served", name, f"{name}: served by the gateway but not declared in {declared.path}"))
    return out


def _proxy_side(declared: Folknet, serving: dict[str, ServingRole], live: Live) -> list[Diff]:
    state = {(s.backend, s.name): s for s in live.servers}
    out = []
    for a in declared.active():
        lines = [state[k] for ro in serving.values() if a.name in ro.aliases
                 for r in ro.replicas.values() if (k := (ro.backend, r.server)) in state]
        if not lines:
            continue
        limit = sum(s.slim for s in lines)
        if limit != a.max_inflight:
            detail = " + ".join(f"{s.backend}/{s.name} {s.slim}" for s in lines)
            out.append(Diff("limit", a.name, f"{a.name}: declared max_inflight {a.max_inflight}, HAProxy's maxconn "
                                             f"{limit} ({detail})"))
        if a.name in live.served and not any(s.ready for s in lines):
            states = ", ".join(f"{s.name} {s.state}" for s in lines)
            out.append(Diff("none-up", a.name, f"{a.name}: served by the gateway but no server ready in HAProxy "
                                               f"({states})"))
    return out


def _keys_side(declared: Folknet, keys: dict[str, list[str]]) -> list[Diff]:
    out = []
    for key, allowed in sorted(keys.items()):
        granted = {a.name for a in declared.active() if key in a.keys}
        for alias in sorted(set(allowed) - granted):
            out.append(Diff("key-too-much", alias, f"key {key} may use {alias}, which {declared.path.name} does "
                                                   "not grant it", key))
        for alias in sorted(granted - set(allowed)):
            out.append(Diff("key-missing", alias, f"key {key} may not use {alias}, which {declared.path.name} "
                                                  "grants it", key))
    return out


def compare(declared: Folknet, serving: dict[str, ServingRole], live: Live) -> list[Diff]:
    """Every difference between the declaration and what runs, one per line's worth."""
    out = _declared_side(declared, set(live.served)) + _proxy_side(declared, serving, live)
    if live.limits is not None:
        out += _limits_side(declared, live.limits)
    if live.keys is not None:
        out += _keys_side(declared, live.keys)
    return out


def parse_keys(raw: bytes | str, where: str) -> dict[str, list[str]]:
    """The gateway's keys file: `{ID: {"name": KEY, "models": [ALIAS, ...]}}` (digests, never keys)."""
    text = jsonfile.decode(raw, where, "keys file") if isinstance(raw, bytes) else raw
    try:
        data = jsonfile.parse(text, where, "keys file")
        return {str(v["name"]): [str(m) for m in v["models"]] for v in data.values()
                if not v.get("job") and not v.get("service")}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise NevError(f"{where}: not a keys file of {{id: {{name, models}}}} ({e})") from None


def gather(rig: RigFile, served: list[str], limits: dict[str, dict[str, int]] | None = None) -> Live:
    """HAProxy's server lines through its runtime API and the gateway's keys file, over SSH."""
    proxies = {ro.proxy for ro in rig.serving.values()}
    servers: list[Server] = []
    keys = None
    with Hosts(rig) as hosts:
        for name in sorted(proxies):
            role = rig.roles[name]
            if not role.admin:
                raise NevError(f"role {name} in {rig.path} declares no `admin` command for HAProxy's runtime API")
            servers += Admin(hosts.get(role.hosts[0]), role.admin, role.hosts[0]).servers()
        gw = next((r for r in rig.roles.values() if r.keys_file), None)
        if gw is not None and gw.keys_file:
            where = f"{gw.hosts[0]}:{gw.keys_file}"
            keys = parse_keys(hosts.get(gw.hosts[0]).read_file(gw.keys_file), where)
    return Live(served=served, servers=servers, keys=keys, limits=limits)


def _admin_get(path: str, timeout: float) -> Any:
    from bench import gateway, gateway_http
    from bench.gateway_http import Endpoint
    from lanes.base import settings

    ep = Endpoint(gateway.url_from_settings(), gateway.read_key(settings.get_path(settings.GATEWAY_ADMIN_KEY_FILE),
                                                                 settings.GATEWAY_ADMIN_KEY_FILE.name,
                                                                 "`nev rig drift` (the gateway's admin key)"))
    r = gateway_http.get_api(ep, path, (min(5.0, timeout), timeout))
    if r.status != 200:
        raise NevError(f"the gateway's {path} answered HTTP {r.status}: {gateway_http.error_message(r.body)}")
    return r.json()


def served_models(timeout: float = 30.0) -> list[str]:
    """The gateway's whole model list, read with its admin key (a key with an allowlist sees less)."""
    return sorted({str(m["id"]) for m in _admin_get("/v1/models", timeout).get("data", [])})


def parse_limits(data: Any) -> dict[str, dict[str, int]]:
    """Per alias, the limits of /v1/model/info's `litellm_params` (pure; an alias served by
    several entries has each one's limits summed, as LiteLLM enforces them per entry)."""
    out: dict[str, dict[str, int]] = {}
    for m in (data or {}).get("data", []) if isinstance(data, dict) else []:
        params = m.get("litellm_params") if isinstance(m, dict) else None
        if not isinstance(params, dict) or "model_name" not in m:
            continue
        got = out.setdefault(str(m["model_name"]), {})
        for k in LIMIT_FIELDS:
            v = params.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                got[k] = got.get(k, 0) + v
    return out


def served_limits(timeout: float = 30.0) -> dict[str, dict[str, int]]:
    """Each served alias's limits as the running gateway holds them (admin key)."""
    return parse_limits(_admin_get("/v1/model/info", timeout))
