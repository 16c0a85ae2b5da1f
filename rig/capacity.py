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

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.folknet import Folknet
from lanes.base import jsonfile
from lanes.base.inventory_record import Host, Snapshot

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


def read_sweeps(directory: Path) -> dict[str, Sweep]:
    """The saved sweeps by alias; a file that is not a sweep is skipped (`bench.plan.read_throughput`)."""
    from bench.plan import read_throughput

    return {alias: Sweep.of(d) for alias, d in read_throughput(directory).items()}


def _number(v: object) -> float | None:
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None     # as written


def _whole(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Sweep:
    """What capacity reads of one saved `nev rig throughput` sweep (`rig.throughput.save`)."""

    peak_output_tok_s: float | None = None
    peak_at: int | None = None
    knee: int | None = None
    measured_at: str | None = None

    @classmethod
    def of(cls, d: Mapping[str, object]) -> Sweep:
        at = d.get("measured_at")
        return cls(
            _number(d.get("peak_output_tok_s")),
            _whole(d.get("peak_at")),
            _whole(d.get("knee")),
            at if isinstance(at, str) else None,
        )


def _host_roles(host: Host) -> list[str]:
    if host.inventory is not None and host.inventory.roles:
        return list(host.inventory.roles)
    return [host.role] if host.role else []


@dataclass(frozen=True)
class ClassPower:
    name: str
    count: int
    idle_w: float
    busy_w: float

    def to_json(self) -> dict[str, object]:
        return {"class": self.name, "count": self.count, "idle_w": self.idle_w,
                "busy_w": self.busy_w}


@dataclass(frozen=True)
class RolePower:
    """One role's power: from the inventory (hosts up that advertise a class) or as declared."""

    role: str
    source: str                 # inventory | declared
    classes: list[ClassPower]
    budget_w: float | None

    @property
    def hosts(self) -> int:
        return sum(p.count for p in self.classes)

    @property
    def idle_w(self) -> float:
        return sum(p.count * p.idle_w for p in self.classes)

    @property
    def busy_w(self) -> float:
        return sum(p.count * p.busy_w for p in self.classes)

    def to_json(self) -> dict[str, object]:
        return {
            "role": self.role,
            "source": self.source,
            "classes": [p.to_json() for p in self.classes],
            "hosts": self.hosts,
            "idle_w": self.idle_w,
            "busy_w": self.busy_w,
            "budget_w": self.budget_w,
        }


def power(declared: Declared, snapshot: Snapshot | None) -> tuple[list[RolePower], list[str]]:
    """Rows per role and notes. A role whose hosts advertise a hardware class is counted from the
    inventory (hosts up); otherwise from the declared counts."""
    hosts = snapshot.hosts if snapshot is not None else {}
    counted: dict[tuple[str, str], int] = {}
    notes: list[str] = []
    known = {(c.role, c.name) for c in declared.classes}
    for name, h in sorted(hosts.items()):
        cls = h.inventory.hardware_class if h.inventory is not None else None
        if cls is None or not h.up:
            continue
        for role in _host_roles(h):
            counted[(role, cls)] = counted.get((role, cls), 0) + 1
            if (role, cls) not in known:
                notes.append(f"host {name}: role {role}, class {cls} has no declared power figures "
                             f"in {declared.path}; not counted")
    roles_from_inventory = {r for (r, _c) in counted}
    rows: list[RolePower] = []
    for role in sorted({c.role for c in declared.classes} | set(declared.budget_roles_w)):
        parts: list[ClassPower] = []
        for c in (c for c in declared.classes if c.role == role):
            n = counted.get((role, c.name), 0) if role in roles_from_inventory else c.count
            if n:
                parts.append(ClassPower(c.name, n, c.idle_w, c.busy_w))
        rows.append(
            RolePower(
                role,
                "inventory" if role in roles_from_inventory else "declared",
                parts,
                declared.budget_roles_w.get(role),
            )
        )
    return rows, notes


def _w(x: float) -> str:
    return f"{x:.0f} W"


def budget_warnings(rows: list[RolePower], total_budget: float | None) -> list[str]:
    """One line per role (and for the total) whose busy power is over its declared budget."""
    out = []
    for r in rows:
        if r.budget_w is not None and r.busy_w > r.budget_w:
            parts = ", ".join(f"{p.count} x {p.name} at {_w(p.busy_w)}" for p in r.classes)
            out.append(f"power budget exceeded: role {r.role} draws up to {_w(r.busy_w)} busy "
                       f"({parts}) against its declared budget of {_w(r.budget_w)}, "
                       f"{_w(r.busy_w - r.budget_w)} over (a warning: nothing is enforced)")
    busy = sum(r.busy_w for r in rows)
    if total_budget is not None and busy > total_budget:
        parts = ", ".join(f"{r.role} {_w(r.busy_w)}" for r in rows if r.busy_w)
        out.append(f"power budget exceeded: the rig draws up to {_w(busy)} busy ({parts}) against its declared "
                   f"total of {_w(total_budget)}, {_w(busy - total_budget)} over (a warning: nothing is enforced)")
    return out


@dataclass(frozen=True)
class AliasCapacity:
    """One active alias: its status, limit, measured peak and candidates/hour."""

    alias: str
    tier: str
    max_inflight: int
    status: str
    sweep: Sweep | None
    candidates_per_hour: int | None
    note: str | None

    def to_json(self) -> dict[str, object]:
        sw = self.sweep
        return {
            "alias": self.alias,
            "tier": self.tier,
            "max_inflight": self.max_inflight,
            "status": self.status,
            "peak_output_tok_s": sw.peak_output_tok_s if sw else None,
            "peak_at": sw.peak_at if sw else None,
            "knee": sw.knee if sw else None,
            "measured_at": sw.measured_at if sw else None,
            "candidates_per_hour": self.candidates_per_hour,
            "note": self.note,
        }


@dataclass(frozen=True)
class PoolCapacity:
    pool: str
    aliases: list[AliasCapacity]

    @property
    def candidates_per_hour(self) -> int | None:
        measured = [a.candidates_per_hour for a in self.aliases
                    if a.candidates_per_hour is not None]
        return max(measured) if measured else None

    def to_json(self) -> dict[str, object]:
        return {"pool": self.pool, "aliases": [a.to_json() for a in self.aliases],
                "candidates_per_hour": self.candidates_per_hour}


def pools(folknet: Folknet, snapshot: Snapshot | None, sweeps: Mapping[str, Sweep],
          answer_tokens: int) -> list[PoolCapacity]:
    """Per pool: its active aliases with status, limit, measured peak and candidates/hour."""
    snap_aliases = snapshot.aliases if snapshot is not None else {}
    by_pool: dict[str, list[AliasCapacity]] = {}
    for a in sorted(folknet.active(), key=lambda a: (a.pool, a.name)):
        sw = sweeps.get(a.name)
        peak = sw.peak_output_tok_s if sw else None
        state = snap_aliases.get(a.name)
        if sw is None:
            note: str | None = f"not measured: run `nev rig throughput {a.name}`"
        else:
            note = "sweep not saturated: the peak is a lower bound" if sw.knee is None else None
        by_pool.setdefault(a.pool, []).append(AliasCapacity(
            a.name, a.tier, a.max_inflight, state.status if state is not None else "unknown", sw,
            round(3600 * peak / answer_tokens) if peak else None, note))
    return [PoolCapacity(pool, rows) for pool, rows in sorted(by_pool.items())]


CAVEAT = (
    "candidates/hour are decode-bound (peak measured output tokens/s over the declared answer "
    "size); the prefill of the declared prompt is not in the figure. Watts are declared "
    "per-class figures, not measurements."
)


@dataclass(frozen=True)
class Capacity:
    """The whole capacity result: `nev rig capacity` (and its --json)."""

    declared: Declared
    pools: list[PoolCapacity]
    roles: list[RolePower]
    warnings: list[str]
    notes: list[str]

    @property
    def idle_w(self) -> float:
        return sum(r.idle_w for r in self.roles)

    @property
    def busy_w(self) -> float:
        return sum(r.busy_w for r in self.roles)

    def to_json(self) -> dict[str, object]:
        d = self.declared
        return {"schema": SCHEMA, "declared_file": str(d.path),
                "candidate": {"prompt_tokens": d.prompt_tokens, "answer_tokens": d.answer_tokens},
                "pools": [p.to_json() for p in self.pools],
                "power": {"roles": [r.to_json() for r in self.roles], "idle_w": self.idle_w,
                          "busy_w": self.busy_w, "budget_total_w": d.budget_total_w},
                "warnings": list(self.warnings), "notes": list(self.notes), "caveat": CAVEAT}


def model(folknet: Folknet, snapshot: Snapshot | None, sweeps: Mapping[str, Sweep],
          declared: Declared) -> Capacity:
    """The whole capacity result (pure)."""
    rows, notes = power(declared, snapshot)
    return Capacity(declared, pools(folknet, snapshot, sweeps, declared.answer_tokens), rows,
                    budget_warnings(rows, declared.budget_total_w), notes)


def render(m: Capacity) -> str:
    d = m.declared
    out = [f"pools (a candidate: {d.prompt_tokens} prompt + {d.answer_tokens} answer tokens)",
           f"{'pool':<8} {'alias':<24} {'status':<8} {'limit':>5} {'peak out tok/s':>14} {'at':>4} "
           f"{'cand/hour':>9}  note"]
    for p in m.pools:
        for a in p.aliases:
            sw = a.sweep
            tok_s = sw.peak_output_tok_s if sw else None
            peak = "-" if tok_s is None else f"{tok_s:.1f}"
            cph = "-" if a.candidates_per_hour is None else str(a.candidates_per_hour)
            at = "-" if sw is None or sw.peak_at is None else str(sw.peak_at)
            out.append(f"{p.pool:<8} {a.alias:<24} {a.status:<8} {a.max_inflight:>5} {peak:>14} "
                       f"{at:>4} {cph:>9}  {a.note or ''}".rstrip())
    out += ["", "power per role (declared per-class figures)",
            f"{'role':<10} {'hosts':>5} {'idle':>8} {'busy':>8} {'budget':>8}  from"]
    for r in m.roles:
        budget = "-" if r.budget_w is None else _w(r.budget_w)
        out.append(f"{r.role:<10} {r.hosts:>5} {_w(r.idle_w):>8} {_w(r.busy_w):>8} {budget:>8}  "
                   f"{r.source}")
    total = "-" if d.budget_total_w is None else _w(d.budget_total_w)
    out.append(f"{'total':<10} {'':>5} {_w(m.idle_w):>8} {_w(m.busy_w):>8} {total:>8}")
    out += [f"note: {n}" for n in m.notes]
    out += [f"warning: {w}" for w in m.warnings]
    return "\n".join(out)
