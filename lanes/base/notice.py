"""One notification as a record (`Notice`): what `lanes.base.notify` sends and keeps in its
outbox, and what `lanes.base.chatformat` renders for a chat service."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Notice:
    """One notification: nev's own payload (the `nev` format posts `to_json()`), what the outbox
    keeps and what a chat format renders (`lanes.base.chatformat`)."""

    kind: str
    state: str  # event | down | recovered
    at: str
    rig: str
    subject: str
    detail: str
    key: str  # one per event or incident: a receiver drops a repeat
    #: a landing's announcement (`bench.announce.Announcement.to_json`: title, text, fields and the
    #: numbers behind them), a JSON document passed through to the receiver as it is
    announcement: dict[str, object] | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"nev": 1, "kind": self.kind, "state": self.state, "at": self.at,
                                  "rig": self.rig, "subject": self.subject, "detail": self.detail,
                                  "key": self.key}
        if self.announcement is not None:
            out["announcement"] = self.announcement
        return out

    @classmethod
    def from_json(cls, obj: object) -> Notice | None:
        """An outbox entry as a notice; None for one that does not read as one (dropped)."""
        if not isinstance(obj, dict):
            return None
        vals = {k: obj.get(k) for k in ("kind", "state", "at", "rig", "subject", "detail", "key")}
        if not all(isinstance(v, str) for v in vals.values()):
            return None
        ann = obj.get("announcement")
        return cls(**{k: str(v) for k, v in vals.items()},
                   announcement=ann if isinstance(ann, dict) else None)
