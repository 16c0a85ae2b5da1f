"""Every relative link of README.md and docs/ leads somewhere: the file exists, and a `#anchor`
into a page is one of its headings (GitHub's slugs), so moving a section never leaves a link
behind."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not in_fence:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken(root: Path = ROOT) -> list[str]:
    out = []
    for doc in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        in_fence = False
        for no, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if _FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            for target in _LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                file, _, anchor = target.partition("#")
                page = (doc.parent / file).resolve() if file else doc
                where = f"{doc.relative_to(root)}:{no}: {target}"
                if not page.exists():
                    out.append(f"{where}: no such file")
                elif anchor and page.suffix == ".md" and anchor not in anchors(page):
                    out.append(f"{where}: no heading with that anchor in {page.relative_to(root)}")
    return out


def test_every_relative_link_in_the_docs_leads_somewhere():
    assert broken() == []


def test_slugs_are_githubs():
    assert slug("`nev lane install`: this nev on the lane") == \
        "nev-lane-install-this-nev-on-the-lane"
    assert slug("Services: `nev rig services install | status | remove`") == \
        "services-nev-rig-services-install--status--remove"
    assert slug("What travels (one SSH channel)") == "what-travels-one-ssh-channel"


def test_a_link_to_a_moved_section_fails(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("See [the root](docs/a.md#the-lane-root).\n")
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Copy names\n\n[b](b.md)\n")
    assert [p.split(": ", 2)[-1] for p in broken(tmp_path)] == [
        "no heading with that anchor in docs/a.md", "no such file"]
