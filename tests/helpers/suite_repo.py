"""A small conformance suite in web-platform-tests' check-layout format, written for nev's tests
(no page or script of WPT itself): four tests, one of them failing in Firefox only.

`flex/moz-available.html` gives a flex item `width: -moz-available`, a value only Firefox knows:
Chromium and WebKit drop the declaration and the empty item shrinks to 0 (the page's
expectation), Firefox stretches it to the container's 200px.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lane_helpers as h

FAILING = {"chromium": [], "firefox": ["flex/moz-available.html"], "webkit": []}
TESTS = ["block/offsets.html", "block/width-auto.html", "flex/grow.html", "flex/moz-available.html"]

CHECK_LAYOUT_JS = """\
// A small stand-in for check-layout-th.js, written for nev's tests: checkLayout(selector) compares
// each matched element and its descendants with their data-expected-width/-height (offsetWidth,
// offsetHeight) and data-offset-x/-y (offsetLeft, offsetTop), and writes PASS or FAIL in the page.
function checkLayout(selector) {
  const wanted = {"data-expected-width": "offsetWidth", "data-expected-height": "offsetHeight",
                  "data-offset-x": "offsetLeft", "data-offset-y": "offsetTop"};
  const failures = [];
  for (const root of document.querySelectorAll(selector)) {
    for (const el of [root, ...root.querySelectorAll("*")]) {
      for (const [attr, prop] of Object.entries(wanted)) {
        if (el.hasAttribute(attr) && el[prop] != Number(el.getAttribute(attr)))
          failures.push(attr + " " + el.getAttribute(attr) + " got " + el[prop]);
      }
    }
  }
  const out = document.createElement("pre");
  out.textContent = failures.length ? "FAIL\\n" + failures.join("\\n") : "PASS";
  document.body.appendChild(out);
}
"""


def _page(title: str, style: str, body: str) -> str:
    return f"""<!DOCTYPE html>
<meta charset="utf-8">
<title>{title}</title>
<script src="/resources/check-layout-th.js"></script>
<style>body {{ margin: 0; }} {style}</style>
<body onload="checkLayout('.test')">
{body}
</body>
"""


PAGES = {
    "block/width-auto.html": _page(
        "An auto width fills the containing block less the margins", ".cb { width: 200px; }",
        '<div class="cb"><div class="test" style="margin: 0 10px; height: 5px" '
        'data-expected-width="180" data-expected-height="5"></div></div>'),
    "block/offsets.html": _page(
        "Offsets of a block after a block", ".cb { position: relative; width: 100px; }",
        '<div class="cb test"><div style="height: 30px"></div>'
        '<div style="margin-left: 7px; height: 4px" data-offset-x="7" data-offset-y="30" '
        'data-expected-width="93"></div></div>'),
    "flex/grow.html": _page(
        "Two items growing equally share the free space", ".flex { display: flex; width: 300px; }",
        '<div class="flex test"><div style="flex: 1; height: 3px" data-expected-width="150"></div>'
        '<div style="flex: 1; height: 3px" data-expected-width="150"></div></div>'),
    "flex/moz-available.html": _page(
        "An unknown width value is dropped: the empty item shrinks to nothing",
        ".flex { display: flex; width: 200px; }",
        '<div class="flex test"><div style="width: -moz-available; height: 5px" '
        'data-expected-width="0"></div></div>'),
    # not a test: it calls no checkLayout
    "flex/support/reference.html": "<!DOCTYPE html><div style='width: 150px'>reference</div>\n",
    "resources/check-layout-th.js": CHECK_LAYOUT_JS,
}


def make_suite_repo(root: Path) -> tuple[Path, str]:
    """A bare repository holding the suite (one commit on main, a second one after it so the pin
    is not the tip), and the pinned commit."""
    work = root / "suite-work"
    work.mkdir(parents=True)
    h.git(work, "init", "-q", "-b", "main")
    for rel, text in PAGES.items():
        p = work / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    h.git(work, "add", "-A")
    h.git(work, "commit", "-qm", "suite")
    pinned = h.git(work, "rev-parse", "HEAD")
    (work / "README").write_text("after the pin\n")
    h.git(work, "add", "-A")
    h.git(work, "commit", "-qm", "later")
    bare = root / "suite.git"
    h.git(root, "clone", "-q", "--bare", str(work), str(bare))
    return bare, pinned


def declare(repo: Path, name: str, url: str, commit: str, failing: dict | None = None) -> None:
    """tracks.json of `repo` declaring the suite, and its expectations file when `failing`."""
    import json

    tracks = repo / "tracks.json"
    data = json.loads(tracks.read_text()) if tracks.exists() else {"verify": "true"}
    data["suites"] = {name: {"url": url, "commit": commit}}
    tracks.write_text(json.dumps(data, indent=2) + "\n")
    if failing is not None:
        exp = repo / "oracle" / "suites" / f"{name}.expected.json"
        exp.parent.mkdir(parents=True, exist_ok=True)
        exp.write_text(json.dumps({"failures": failing}, indent=2) + "\n")
