"""YAML read safely and strictly (lanes/base/yamlfile.py): an alias bomb, duplicate keys, deep
nesting and unknown tags are one line with the place, before any walk; a manifest through
`nev job submit`'s reader is refused the same way; every generated document gets an answer."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import manifest
from lanes.base import yamlfile
from lanes.base.errors import ConfigError


def bomb(width: int, levels: int) -> str:
    doc = "a: &a [" + ",".join(["x"] * width) + "]\n"
    prev = "a"
    for k in range(levels):
        name = f"l{k}"
        doc += f"{name}: &{name} [" + ",".join([f"*{prev}"] * width) + "]\n"
        prev = name
    return doc


def test_an_alias_bomb_is_refused_at_once_before_any_walk(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: demo\nbase: abc\n" + bomb(9, 8))
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as e:
        manifest.read(path)
    assert time.monotonic() - t0 < 5  # 8 levels of 9 ran over 60 s before
    assert str(path) in e.value.message and "alias bomb" in e.value.message


@pytest.mark.parametrize(
    "doc, words",
    [
        (
            "name: a\nstages: []\nname: b\n",
            "has the key 'name' twice (line 3, column 1; first at line 1)",
        ),
        (
            "stages:\n  - name: s\n    kind: verify\n    kind: gate\n",
            "has the key 'kind' twice (line 4, column 5",
        ),
        ("name: [a, b\n", "is not valid YAML at line 2, column 1"),
        ("name: !!python/object/apply:os.system [ls]\n", "is not valid YAML at line 1"),
        ("- &r [*r]\n", "an alias inside the value it names"),
        ("[" * 3000 + "]" * 3000, "nested too deeply"),
        ("n: " + "9" * 5000 + "\n", "out of range"),
    ],
)
def test_a_bad_manifest_is_one_line_naming_the_place(tmp_path, doc, words):
    path = tmp_path / "m.yaml"
    path.write_text(doc)
    with pytest.raises(ConfigError) as e:
        manifest.read(path)
    msg = e.value.message
    assert (
        msg.startswith(f"{path}: the manifest ") and words in msg and msg.endswith("fix the file")
    )
    assert "\n" not in msg


def test_aliases_that_stay_small_are_read():
    got = yamlfile.load("base: &b {cpu: 2}\none: *b\ntwo: *b\n", "x.yaml", "manifest")
    assert got == {"base": {"cpu": 2}, "one": {"cpu": 2}, "two": {"cpu": 2}}


_scalars = st.one_of(
    st.integers(-5, 5), st.sampled_from(["a", "b", "x y", "é"]), st.booleans(), st.none()
)


@st.composite
def documents(draw: st.DrawFn) -> str:
    """YAML text with anchors, aliases (some nested in what they name), duplicate keys, deep
    nesting and plain garbage, built as text so that what YAML forbids can appear."""
    lines: list[str] = []
    anchors: list[str] = []
    for k in range(draw(st.integers(1, 12))):
        key = draw(st.sampled_from(["name", "base", "stages", "spec", f"k{k}"]))
        kind = draw(st.sampled_from(["scalar", "anchor", "alias", "nest", "garbage", "list"]))
        if kind == "scalar":
            lines.append(f"{key}: {draw(_scalars)!r}")
        elif kind == "anchor":
            name = f"a{k}"
            refs = (
                [f"*{a}" for a in draw(st.lists(st.sampled_from(anchors), max_size=9))]
                if anchors
                else []
            )
            lines.append(f"{key}: &{name} [{', '.join(refs + ['1'])}]")
            anchors.append(name)
        elif kind == "alias" and anchors:
            lines.append(f"{key}: *{draw(st.sampled_from(anchors))}")
        elif kind == "nest":
            d = draw(st.integers(1, 400))
            lines.append(f"{key}: " + "[" * d + "]" * d)
        elif kind == "garbage":
            lines.append(draw(st.text(alphabet="{}[]:&*!-'\" ,#\n\tab", max_size=30)))
        else:
            lines.append(
                f"{key}:\n"
                + "\n".join(f"  - {draw(_scalars)!r}" for _ in range(draw(st.integers(0, 4))))
            )
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_every_document_gets_an_answer_in_bounded_time(doc):
    t0 = time.monotonic()
    try:
        yamlfile.load(doc, "f.yaml", "manifest")
    except ConfigError as e:
        assert e.message.startswith("f.yaml: the manifest ") and "\n" not in e.message
    assert time.monotonic() - t0 < 5
