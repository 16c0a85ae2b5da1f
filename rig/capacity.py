"""`nev rig capacity`: candidates per hour per pool and power per role, from what is declared and
what was measured.

Inputs:
- `bench/folknet.json` (NEV_FOLKNET_FILE): the aliases, their pools and in-flight limits;
- the inventory snapshot (NEV_INVENTORY): alias status, and which hosts of which hardware class
  serve which role (when hosts advertise a `hardware_class`);
- the measured sweeps of `nev rig throughput` (NEV_THROUGHPUT_DIR/<alias>.json);
- `bench/capacity.json` (NEV_CAPACITY_FILE): the candidate's prompt/answer size, per-class power
  figures by role (no host names) and the power budget.

Candidates per hour = 3600 x the alias's peak measured output tokens/s / the declared answer
tokens (decode-bound: the sweep's own prompt is short, so the prefill of a long prompt is not in
the figure; said so). Power per role = the sum over its classes of count x the class's figures;
busy power above a declared budget is a warning naming the role and the figures, never enforced.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.folknet import Folknet
from lanes.base import jsonfile

SCHEMA = 1


@dataclass(frozen=True)
class HostClass:
    role: str
    name: str
    count: int
    idle_w: float
    busy_w: float
    what: str = ""


@dataclass(frozen=True)
class Declared:
    path: Path
    prompt_tokens: int
    answer_tokens: int
    classes: list[HostClass]
    budget_total_w: float | None
    budget_roles_w: dict[str, float]


def load(path: Path) -> Declared:
    data = jsonfile.load(path, "capacity file")
    f = jsonfile.Fields(path)
    top = f.obj(data, "(top level)")
    cand = f.get(top, "candidate", dict, "")
    prompt = f.get(cand, "prompt_tokens", int, "candidate")
    answer = f.get(cand, "answer_tokens", int, "candidate")
    if prompt < 0:
        raise f.fail("candidate.prompt_tokens", "must be 0 or more")
    if answer < 1:
        raise f.fail("candidate.answer_tokens", "must be at least 1")
    classes: list[HostClass] = []
    for role, by_class in f.get(top, "roles", dict, "").items():
        f.obj(by_class, f"roles.{role}")
        for name, c in by_class.items():
            where = f"roles.{role}.{name}"
            f.obj(c, where)
            count = f.get(c, "count", int, where)
            idle = float(f.get(c, "idle_w", (int, float), where))
            busy = float(f.get(c, "busy_w", (int, float), where))
            if count < 0 or idle < 0 or busy < idle:
                raise f.fail(where, "needs count >= 0 and 0 <= idle_w <= busy_w")
            classes.append(HostClass(role, name, count, idle, busy, f.get(c, "what", str, where, required=False,
                                                                         default="")))
    budget = f.get(top, "power_budget_w", dict, "", required=False, default={})
    total = f.get(budget, "total", (int, float), "power_budget_w", required=False)
    roles_b = f.get(budget, "roles", dict, "power_budget_w", required=False, default={})
    for r, w in roles_b.items():
        if isinstance(w, bool) or not isinstance(w, int | float):
            raise f.fail(f"power_budget_w.roles.{r}", "must be a number of watts")
    return Declared(path, prompt, answer, classes, float(total) if total is not None else None,
                    {r: float(w) for r, w in roles_b.items()})


def read_sweeps(directory: Path) -> dict[str, dict[str, Any]]:
    """The saved sweeps by alias; a file that is not a sweep is skipped (`bench.plan.read_throughput`)."""
    from bench.plan import read_throughput

    return read_throughput(directory)


def _host_class(host: dict[str, Any]) -> str | None:
    inv = host.get("inventory") or {}
    c = inv.get("hardware_class") if isinstance(inv, dict) else None
    return c if isinstance(c, str) and c else None


def _host_roles(host: dict[str, Any]) -> list[str]:
    inv = host.get("inventory") or {}
    roles = inv.get("roles") if isinstance(inv, dict) else None
    if isinstance(roles, list) and roles:
        return [str(r) for r in roles]
    return [str(host["role"])] if host.get("role") else []


def power(declared: Declared, snapshot: dict[str, Any] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows per role and notes. A role whose hosts advertise a hardware class is counted from the
    inventory (hosts up); otherwise from the declared counts."""
    hosts = (snapshot or {}).get("hosts") or {}
    counted: dict[tuple[str, str], int] = {}
    notes: list[str] = []
    known = {(c.role, c.name) for c in declared.classes}
    for name, h in sorted(hosts.items()):
        cls = _host_class(h)
        if cls is None or h.get("status") != "up":
            continue
        for role in _host_roles(h):
            counted[(role, cls)] = counted.get((role, cls), 0) + 1
            if (role, cls) not in known:
                notes.append(f"host {name}: role {role}, class {cls} has no declared power figures "
                             f"in {declared.path}; not counted")
    roles_from_inventory = {r for (r, _c) in counted}
    rows: list[dict[str, Any]] = []
    for role in sorted({c.role for c in declared.classes} | set(declared.budget_roles_w)):
        parts: list[dict[str, Any]] = []
        for c in (c for c in declared.classes if c.role == role):
            n = counted.get((role, c.name), 0) if role in roles_from_inventory else c.count
            if n:
                parts.append({"class": c.name, "count": n, "idle_w": c.idle_w, "busy_w": c.busy_w})
        rows.append({"role": role, "source": "inventory" if role in roles_from_inventory else "declared",
                     "classes": parts, "hosts": sum(p["count"] for p in parts),
                     "idle_w": sum(p["count"] * p["idle_w"] for p in parts),
                     "busy_w": sum(p["count"] * p["busy_w"] for p in parts),
                     "budget_w": declared.budget_roles_w.get(role)})
    return rows, notes


def _w(x: float) -> str:
    return f"{x:.0f} W"


def budget_warnings(rows: list[dict[str, Any]], total_budget: float | None) -> list[str]:
    """One line per role (and for the total) whose busy power is over its declared budget."""
    out = []
    for r in rows:
        if r["budget_w"] is not None and r["busy_w"] > r["budget_w"]:
            parts = ", ".join(f"{p['count']} x {p['class']} at {_w(p['busy_w'])}" for p in r["classes"])
            out.append(f"power budget exceeded: role {r['role']} draws up to {_w(r['busy_w'])} busy "
                       f"({parts}) against its declared budget of {_w(r['budget_w'])}, "
                       f"{_w(r['busy_w'] - r['budget_w'])} over (a warning: nothing is enforced)")
    busy = sum(r["busy_w"] for r in rows)
    if total_budget is not None and busy > total_budget:
        parts = ", ".join(f"{r['role']} {_w(r['busy_w'])}" for r in rows if r["busy_w"])
        out.append(f"power budget exceeded: the rig draws up to {_w(busy)} busy ({parts}) against its declared "
                   f"total of {_w(total_budget)}, {_w(busy - total_budget)} over (a warning: nothing is enforced)")
    return out


def pools(folknet: Folknet, snapshot: dict[str, Any] | None, sweeps: dict[str, dict[str, Any]],
          answer_tokens: int) -> list[dict[str, Any]]:
    """Per pool: its active aliases with status, limit, measured peak and candidates/hour."""
    snap_aliases = (snapshot or {}).get("aliases") or {}
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for a in sorted(folknet.active(), key=lambda a: (a.pool, a.name)):
        sw = sweeps.get(a.name)
        peak = sw.get("peak_output_tok_s") if sw else None
        row = {"alias": a.name, "tier": a.tier, "max_inflight": a.max_inflight,
               "status": (snap_aliases.get(a.name) or {}).get("status", "unknown"),
               "peak_output_tok_s": peak, "peak_at": sw.get("peak_at") if sw else None,
               "knee": sw.get("knee") if sw else None, "measured_at": sw.get("measured_at") if sw else None,
               "candidates_per_hour": round(3600 * peak / answer_tokens) if peak else None,
               "note": None if sw else f"not measured: run `nev rig throughput {a.name}`"}
        if sw and sw.get("knee") is None:
            row["note"] = "sweep not saturated: the peak is a lower bound"
        by_pool.setdefault(a.pool, []).append(row)
    out = []
    for pool, rows in sorted(by_pool.items()):
        measured = [r["candidates_per_hour"] for r in rows if r["candidates_per_hour"] is not None]
        out.append({"pool": pool, "aliases": rows,
                    "candidates_per_hour": max(measured) if measured else None})
    return out


def model(folknet: Folknet, snapshot: dict[str, Any] | None, sweeps: dict[str, dict[str, Any]],
          declared: Declared) -> dict[str, Any]:
    """The whole capacity result (pure)."""
    rows, notes = power(declared, snapshot)
    return {"schema": SCHEMA, "declared_file": str(declared.path),
            "candidate": {"prompt_tokens": declared.prompt_tokens, "answer_tokens": declared.answer_tokens},
            "pools": pools(folknet, snapshot, sweeps, declared.answer_tokens),
            "power": {"roles": rows, "idle_w": sum(r["idle_w"] for r in rows),
                      "busy_w": sum(r["busy_w"] for r in rows), "budget_total_w": declared.budget_total_w},
            "warnings": budget_warnings(rows, declared.budget_total_w), "notes": notes,
            "caveat": "candidates/hour are decode-bound (peak measured output tokens/s over the declared answer "
                      "size); the prefill of the declared prompt is not in the figure. Watts are declared "
                      "per-class figures, not measurements."}


def render(m: dict[str, Any]) -> str:
    c = m["candidate"]
    out = [f"pools (a candidate: {c['prompt_tokens']} prompt + {c['answer_tokens']} answer tokens)",
           f"{'pool':<8} {'alias':<24} {'status':<8} {'limit':>5} {'peak out tok/s':>14} {'at':>4} "
           f"{'cand/hour':>9}  note"]
    for p in m["pools"]:
        for a in p["aliases"]:
            peak = "-" if a["peak_output_tok_s"] is None else f"{a['peak_output_tok_s']:.1f}"
            cph = "-" if a["candidates_per_hour"] is None else str(a["candidates_per_hour"])
            at = "-" if a["peak_at"] is None else str(a["peak_at"])
            out.append(f"{p['pool']:<8} {a['alias']:<24} {a['status']:<8} {a['max_inflight']:>5} {peak:>14} "
                       f"{at:>4} {cph:>9}  {a['note'] or ''}".rstrip())
    pw = m["power"]
    out += ["", "power per role (declared per-class figures)",
            f"{'role':<10} {'hosts':>5} {'idle':>8} {'busy':>8} {'budget':>8}  from"]
    for r in pw["roles"]:
        budget = "-" if r["budget_w"] is None else _w(r["budget_w"])
        out.append(f"{r['role']:<10} {r['hosts']:>5} {_w(r['idle_w']):>8} {_w(r['busy_w']):>8} {budget:>8}  "
                   f"{r['source']}")
    total = "-" if pw["budget_total_w"] is None else _w(pw["budget_total_w"])
    out.append(f"{'total':<10} {'':>5} {_w(pw['idle_w']):>8} {_w(pw['busy_w']):>8} {total:>8}")
    out += [f"note: {n}" for n in m["notes"]]
    out += [f"warning: {w}" for w in m["warnings"]]
    return "\n".join(out)
