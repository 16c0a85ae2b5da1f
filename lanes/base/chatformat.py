"""A notification in the form a chat service's incoming webhook takes (pure): nev's own payload,
a Discord message with an embed, or a Slack message with blocks, each within the service's
documented limits, cut with a marker rather than refused.

`render(fmt, msg)` takes nev's payload (`lanes.base.notify.payload`, plus `announcement` for a
landing: a title, a summary text and (name, value) fields) and gives the body to POST.

- `nev`: the payload as it is.
- `discord`: `content` and one embed (`title`, `description`, `fields`, `footer`), within
  content 2,000 characters; embed title 256, description 4,096, 25 fields (name 256, value
  1,024), footer 2,048, 6,000 in all.
- `slack`: `text` (the notification's fallback) and `blocks` (a header, sections, a context),
  within header text 150, a section's text 3,000, 50 blocks.
"""

from __future__ import annotations

from typing import Any

FORMATS = ("nev", "discord", "slack")
CUT = " … (cut)"

DISCORD_CONTENT = 2000
DISCORD_TITLE = 256
DISCORD_DESCRIPTION = 4096
DISCORD_FIELDS = 25
DISCORD_FIELD_NAME = 256
DISCORD_FIELD_VALUE = 1024
DISCORD_FOOTER = 2048
DISCORD_TOTAL = 6000
SLACK_HEADER = 150
SLACK_SECTION = 3000
SLACK_BLOCKS = 50


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, ended by the marker when it was longer."""
    return text if len(text) <= limit else text[: max(0, limit - len(CUT))] + CUT


def _parts(msg: dict[str, Any]) -> tuple[str, str, list[tuple[str, str]], str]:
    """(title, summary, fields, footer) of a message: its announcement's, or made from the event."""
    ann = msg.get("announcement")
    rig, kind, state = msg.get("rig", ""), msg.get("kind", ""), msg.get("state", "")
    footer = f"{rig} · {kind} · {state} · {msg.get('at', '')}"
    if isinstance(ann, dict):
        fields = [(str(n), str(v)) for n, v in ann.get("fields") or []]
        return str(ann.get("title", "")), str(ann.get("text", "")), fields, footer
    title = f"{kind} {state}: {msg.get('subject', '')}".strip()
    return title, str(msg.get("detail", "")), [], footer


def discord(msg: dict[str, Any]) -> dict[str, Any]:
    title, text, fields, footer = _parts(msg)
    embed: dict[str, Any] = {
        "title": cut(title, DISCORD_TITLE),
        "description": cut(text, DISCORD_DESCRIPTION),
        "footer": {"text": cut(footer, DISCORD_FOOTER)},
    }
    room = (
        DISCORD_TOTAL
        - len(embed["title"])
        - len(embed["description"])
        - len(embed["footer"]["text"])
    )
    out_fields: list[dict[str, Any]] = []
    shown = fields[:DISCORD_FIELDS]
    if len(fields) > DISCORD_FIELDS:
        shown = fields[: DISCORD_FIELDS - 1] + [
            ("…", f"{len(fields) - DISCORD_FIELDS + 1} more not shown")
        ]
    for name, value in shown:
        fname, fvalue = cut(name or "-", DISCORD_FIELD_NAME), cut(value or "-", DISCORD_FIELD_VALUE)
        f: dict[str, Any] = {"name": fname, "value": fvalue, "inline": False}
        size = len(fname) + len(fvalue)
        if size > room:
            if room > 40:
                out_fields.append(
                    {
                        "name": "…",
                        "value": cut(f"{len(shown) - len(out_fields)} more not shown", room - 1),
                        "inline": False,
                    }
                )
            break
        room -= size
        out_fields.append(f)
    embed["fields"] = out_fields
    return {"content": cut(title, DISCORD_CONTENT), "embeds": [embed]}


def slack(msg: dict[str, Any]) -> dict[str, Any]:
    title, text, fields, footer = _parts(msg)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": cut(title, SLACK_HEADER)}}
    ]
    if text:
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, SLACK_SECTION)}}
        )
    room = SLACK_BLOCKS - len(blocks) - 1  # the context block last
    for k, (name, value) in enumerate(fields):
        if k == room - 1 and len(fields) > room:
            blocks.append(
                {
                    "type": "section",
                    "text": {"type": "mrkdwn", "text": f"… {len(fields) - k} more not shown"},
                }
            )
            break
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": cut(f"*{name}*\n{value}", SLACK_SECTION)},
            }
        )
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": cut(footer, SLACK_SECTION)}]}
    )
    return {"text": cut(f"{title}\n{text}".strip(), SLACK_SECTION), "blocks": blocks}


def render(fmt: str, msg: dict[str, Any]) -> dict[str, Any]:
    """The body to POST for a webhook of format `fmt` (one of FORMATS)."""
    if fmt == "discord":
        return discord(msg)
    if fmt == "slack":
        return slack(msg)
    return msg


def discord_problems(body: dict[str, Any]) -> list[str]:
    """What in `body` breaks Discord's documented webhook limits (empty: none): a check of a body
    as the receiver sees it (the demo's receiver runs it)."""
    bad = []
    if len(str(body.get("content", ""))) > DISCORD_CONTENT:
        bad.append(f"content over {DISCORD_CONTENT}")
    total = 0
    for e in body.get("embeds") or []:
        title, desc = str(e.get("title", "")), str(e.get("description", ""))
        foot = str((e.get("footer") or {}).get("text", ""))
        fields = e.get("fields") or []
        bad += [f"embed title over {DISCORD_TITLE}"] * (len(title) > DISCORD_TITLE)
        bad += [f"embed description over {DISCORD_DESCRIPTION}"] * (len(desc) > DISCORD_DESCRIPTION)
        bad += [f"more than {DISCORD_FIELDS} fields"] * (len(fields) > DISCORD_FIELDS)
        for f in fields:
            name, value = str(f.get("name", "")), str(f.get("value", ""))
            bad += ["a field name empty or too long"] * (not 0 < len(name) <= DISCORD_FIELD_NAME)
            bad += ["a field value empty or too long"] * (not 0 < len(value) <= DISCORD_FIELD_VALUE)
            total += len(name) + len(value)
        total += len(title) + len(desc) + len(foot)
    bad += [f"embeds hold {total} characters, over {DISCORD_TOTAL}"] * (total > DISCORD_TOTAL)
    return bad
