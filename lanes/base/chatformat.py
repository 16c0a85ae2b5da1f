"""A notification in the form a chat service's incoming webhook takes (pure): nev's own payload,
a Discord message with an embed, or a Slack message with blocks, each within the service's
documented limits, cut with a marker rather than refused.

`render(fmt, msg)` takes a notice (`lanes.base.notice.Notice`, with its `announcement` for a
landing: a title, a summary text and (name, value) fields) and gives the body to POST: a JSON
document for the receiver, `dict[str, object]`.

- `nev`: the payload as it is.
- `discord`: `content` and one embed (`title`, `description`, `fields`, `footer`), within
  content 2,000 characters; embed title 256, description 4,096, 25 fields (name 256, value
  1,024), footer 2,048, 6,000 in all.
- `slack`: `text` (the notification's fallback) and `blocks` (a header, sections, a context),
  within header text 150, a section's text 3,000, 50 blocks.
"""

from __future__ import annotations

from lanes.base.notice import Notice

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


def _parts(msg: Notice) -> tuple[str, str, list[tuple[str, str]], str]:
    """(title, summary, fields, footer) of a notice: its announcement's, or made from the event."""
    ann = msg.announcement
    footer = f"{msg.rig} · {msg.kind} · {msg.state} · {msg.at}"
    if ann is not None:
        raw = ann.get("fields")
        fields = [(str(f[0]), str(f[1])) for f in (raw if isinstance(raw, list) else [])
                  if isinstance(f, list | tuple) and len(f) == 2]
        return str(ann.get("title", "")), str(ann.get("text", "")), fields, footer
    title = f"{msg.kind} {msg.state}: {msg.subject}".strip()
    return title, msg.detail, [], footer


def discord(msg: Notice) -> dict[str, object]:
    title, text, fields, footer = _parts(msg)
    title, text, footer = (cut(title, DISCORD_TITLE), cut(text, DISCORD_DESCRIPTION),
                           cut(footer, DISCORD_FOOTER))
    embed: dict[str, object] = {"title": title, "description": text, "footer": {"text": footer}}
    room = DISCORD_TOTAL - len(title) - len(text) - len(footer)
    out_fields: list[dict[str, object]] = []
    shown = fields[:DISCORD_FIELDS]
    if len(fields) > DISCORD_FIELDS:
        shown = fields[: DISCORD_FIELDS - 1] + [
            ("…", f"{len(fields) - DISCORD_FIELDS + 1} more not shown")
        ]
    for name, value in shown:
        fname, fvalue = cut(name or "-", DISCORD_FIELD_NAME), cut(value or "-", DISCORD_FIELD_VALUE)
        f: dict[str, object] = {"name": fname, "value": fvalue, "inline": False}
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


def slack(msg: Notice) -> dict[str, object]:
    title, text, fields, footer = _parts(msg)
    blocks: list[dict[str, object]] = [
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


def render(fmt: str, msg: Notice) -> dict[str, object]:
    """The body to POST for a webhook of format `fmt` (one of FORMATS)."""
    if fmt == "discord":
        return discord(msg)
    if fmt == "slack":
        return slack(msg)
    return msg.to_json()


def _obj(v: object) -> dict[str, object]:
    return {str(k): x for k, x in v.items()} if isinstance(v, dict) else {}


def _items(v: object) -> list[object]:
    return v if isinstance(v, list) else []


def discord_problems(body: object) -> list[str]:
    """What in `body` (a received JSON document) breaks Discord's documented webhook limits
    (empty: none): a check of a body as the receiver sees it (the demo's receiver runs it)."""
    bad = []
    top = _obj(body)
    if len(str(top.get("content", ""))) > DISCORD_CONTENT:
        bad.append(f"content over {DISCORD_CONTENT}")
    total = 0
    for e in map(_obj, _items(top.get("embeds"))):
        title, desc = str(e.get("title", "")), str(e.get("description", ""))
        foot = str(_obj(e.get("footer")).get("text", ""))
        fields = [_obj(f) for f in _items(e.get("fields"))]
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
