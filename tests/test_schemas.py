"""The JSON Schemas of the lanes, rig and folknet files: published in docs/ (the same bytes nev
ships), valid schemas, met by the committed examples and the quickstart's, and used by nev's
own readers: a key the schema names is read, any other refused by both."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from bench import folknet
from lanes import lanesfile
from lanes.base import schema
from lanes.base.errors import ConfigError
from rig import rigfile
from tests.test_docs_examples import examples

ROOT = Path(__file__).resolve().parent.parent
READERS = {"lanes": lanesfile.load, "rig": rigfile.load, "folknet": folknet.load}
MINIMAL = {
    "lanes": {"lanes": [{"ssh": "lane@10.0.0.11"}]},
    "rig": {"jump": "me@jump-host",
            "roles": {"proxy": {"hosts": ["root@proxy"], "files": [{"path": "/etc/x"}]}},
            "hosts": {"proxy": {"ssh_key": "k"}},
            "notify": {"rig": "lab", "webhook_file": "k"},
            "forwards": {"forge": {"local_port": 18080, "target": "forge:80"}}},
    "folknet": {"providers": ["p"], "aliases": {"a": {"pool": "g", "max_inflight": 1,
                                                      "provider": "p", "keys": ["batch"]}}},
}
# (file, path to an object in MINIMAL, the key path schema.keys walks)
OBJECTS = [("lanes", (), ()), ("lanes", ("lanes", 0), ("lanes",)),
           ("rig", (), ()), ("rig", ("roles", "proxy"), ("roles",)),
           ("rig", ("roles", "proxy", "files", 0), ("roles", "files")),
           ("rig", ("hosts", "proxy"), ("hosts",)), ("rig", ("notify",), ("notify",)),
           ("rig", ("forwards", "forge"), ("forwards",)),
           ("folknet", (), ()), ("folknet", ("aliases", "a"), ("aliases",))]


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema.load(name))


@pytest.mark.parametrize("name", schema.NAMES)
def test_the_published_schema_is_the_one_nev_reads_with_and_is_valid(name):
    shipped = (schema.HERE / f"{name}.schema.json").read_bytes()
    assert (ROOT / "docs" / f"{name}.schema.json").read_bytes() == shipped, \
        f"docs/{name}.schema.json differs: cp lanes/base/schemas/{name}.schema.json docs/"
    jsonschema.Draft202012Validator.check_schema(json.loads(shipped))


@pytest.mark.parametrize("name, path", [("lanes", "bench/lane.example.json"),
                                        ("rig", "rig/rig.example.json"),
                                        ("folknet", "bench/folknet.json")])
def test_the_committed_examples_meet_their_schema_and_the_reader(name, path):
    doc = json.loads((ROOT / path).read_text())
    validator(name).validate(doc)
    if name != "rig":       # the rig example names key files of a real rig's (~/.ssh/...)
        READERS[name](ROOT / path)


def test_the_quickstarts_files_meet_their_schemas():
    kinds = {"lanes.json": "lanes", "rig.json": "rig", "folknet.json": "folknet"}
    seen = set()
    for e in examples(ROOT):
        name = kinds.get(Path(e.path).name)
        if name and e.doc == "docs/quickstart.md":
            validator(name).validate(json.loads(e.text))
            seen.add(name)
    assert seen == set(kinds.values())


@pytest.mark.parametrize("name, where, walk", OBJECTS)
def test_every_key_the_schema_names_is_read_and_another_is_refused_by_both(tmp_path, name, where,
                                                                            walk):
    doc = json.loads(json.dumps(MINIMAL[name]))
    validator(name).validate(doc)
    obj = doc
    for step in where:
        obj = obj[step]
    assert set(obj) <= set(schema.keys(name, *walk))
    obj["lane_jmup"] = "x"                  # a key no schema has
    assert not validator(name).is_valid(doc)
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(doc))
    (tmp_path / "k").write_text("a key file the rig file names")
    with pytest.raises(ConfigError, match="lane_jmup is not a known key"):
        READERS[name](p)


@pytest.mark.parametrize("name", schema.NAMES)
def test_a_schema_reference_for_editors_is_accepted(tmp_path, name):
    doc = {"$schema": f"https://nev.invalid/schemas/{name}.schema.json", **MINIMAL[name]}
    validator(name).validate(doc)
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(doc))
    (tmp_path / "k").write_text("a key file the rig file names")
    READERS[name](p)
