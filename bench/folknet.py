"""`bench/folknet.json`: the declared model aliases of the gateway.

Each alias names its pool, how many requests it takes at once, its provider,
its tier, the keys allowed to use it and, once it is gone, its retired date.
Hosts are named by role only: this file is committed.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base import jsonfile, settings


@dataclass(frozen=True)
class Alias:
    name: str
    pool: str
    max_inflight: int
    provider: str
    tier: str = "sampling"
    retired: str | None = None
    keys: list[str] = field(default_factory=list)
    supports_n: bool = True
    health: str | None = None

    def is_retired(self, today: dt.date | None = None) -> bool:
        if not self.retired:
            return False
        return dt.date.fromisoformat(self.retired) <= (today or dt.date.today())


@dataclass(frozen=True)
class Folknet:
    path: Path
    aliases: dict[str, Alias]
    providers: list[str]

    def active(self) -> list[Alias]:
        return [a for a in self.aliases.values() if not a.is_retired()]


TIERS = ("sampling", "capacity")


def load(path: Path) -> Folknet:
    data = jsonfile.load(path, "folknet file")
    f = jsonfile.Fields(path)
    top = f.obj(data, "(top level)")
    providers = f.str_list(top, "providers", "", required=True)
    raw = f.get(top, "aliases", dict, "")
    aliases: dict[str, Alias] = {}
    for name, obj in raw.items():
        where = f"aliases.{name}"
        f.obj(obj, where)
        inflight = f.get(obj, "max_inflight", int, where)
        if inflight < 1:
            raise f.fail(f"{where}.max_inflight", "must be at least 1")
        provider = f.get(obj, "provider", str, where)
        tier = f.get(obj, "tier", str, where, required=False, default="sampling")
        if tier not in TIERS:
            raise f.fail(f"{where}.tier", f"must be one of {', '.join(TIERS)}")
        retired = f.get(obj, "retired", str, where, required=False)
        if retired is not None:
            try:
                dt.date.fromisoformat(retired)
            except ValueError:
                raise f.fail(f"{where}.retired", "must be a date as YYYY-MM-DD") from None
        health = f.get(obj, "health", str, where, required=False)
        if health is not None and not health.startswith(("http://", "https://")):
            raise f.fail(f"{where}.health", "must be the backend's health URL (http://... or https://...)")
        aliases[name] = Alias(name=name, pool=f.get(obj, "pool", str, where), max_inflight=inflight,
                              provider=provider, tier=tier, retired=retired,
                              keys=f.str_list(obj, "keys", where),
                              supports_n=f.get(obj, "supports_n", bool, where, required=False, default=True),
                              health=health)
    return Folknet(path=path, aliases=aliases, providers=providers)


def default_path() -> Path:
    return settings.path(settings.FOLKNET_FILE)
