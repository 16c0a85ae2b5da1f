"""The run manifest (bench/runmanifest.py): the same inputs give the same bytes and hash, it is
written once and never over, and drawing again names the first input that no longer holds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import runmanifest as rm
from bench.provenance import CorpusBlock, SpecBlock
from lanes.base.errors import ConfigError


def _spec(file: str, sha: str) -> SpecBlock:
    return SpecBlock(None, "CSS 2.1", "10.3.7", "Absolutely positioned", "https://example.invalid",
                     file, sha)


def _corpus(**over: object) -> CorpusBlock:
    c = {"name": "abspos_width", "key": "c" * 64, "engines": {"chromium": "156", "firefox": "153"},
         "content_sha256": "ignored", "cases": 120, **over}
    return CorpusBlock(**c)  # type: ignore[arg-type]


def _manifest(**over: object) -> rm.RunManifest:
    base = dict(
        function="abspos_width",
        spec=_spec("bench/specs/abspos_width.md", "a" * 64),
        prefix_sha256="b" * 64,
        aliases=[
            rm.PinnedAlias("qwen3.8-27b-fast", "share", 4, 4),
            rm.PinnedAlias("deepseek-v4.1-flash", "escalation", 2, 2),
        ],
        served={
            "qwen3.8-27b-fast": {"model_id": "qwen3.8-27b-fast", "fingerprint": "stand-in-gpu0"},
            "deepseek-v4.1-flash": {
                "model_id": "deepseek-v4.1-flash",
                "fingerprint": "stand-in-gpu1",
            },
        },
        corpus=_corpus(),
        seed_base="15",
        run=rm.RunOptions("qwen3.8-27b-fast:4:4", "deepseek-v4.1-flash:2:2", 3, 1),
        engine_commit="d" * 40,
        nev={"version": "0.1.0", "key": "0123456789abcdef"},
    )
    base.update(over)
    return rm.build(**base)  # type: ignore[arg-type]


def test_the_same_inputs_make_the_same_bytes_and_each_input_changed_is_named():
    m = _manifest()
    assert rm.digest(m) == rm.digest(_manifest()) and rm.difference(m, _manifest()) is None
    assert m.aliases[0].model_id == "qwen3.8-27b-fast" and "content_sha256" not in m.to_json()["corpus"]
    served = replace(m, aliases=(m.aliases[0], replace(m.aliases[1], model_id="deepseek-v4.2-flash")))
    assert rm.difference(m, served) == (
        "alias deepseek-v4.1-flash now serves model deepseek-v4.2-flash, "
        "the manifest pinned deepseek-v4.1-flash"
    )
    gone = replace(m, aliases=(replace(m.aliases[0], model_id=None), m.aliases[1]))
    assert rm.difference(m, gone) == (
        "alias qwen3.8-27b-fast now serves model none, the manifest pinned qwen3.8-27b-fast"
    )
    spec = _manifest(spec=_spec("x", "e" * 64))
    assert (
        rm.difference(m, spec)
        == "the spec text changed (sha256 aaaaaaaaaaaaaaaa pinned, eeeeeeeeeeeeeeee now)"
    )
    assert rm.difference(m, _manifest(prefix_sha256="f" * 64)).startswith(
        "the prompt's shared prefix changed"
    )
    browsers = _manifest(corpus=_corpus(engines={"chromium": "157", "firefox": "153"}))
    assert "the browsers changed" in rm.difference(m, browsers)  # type: ignore[operator]
    assert rm.difference(m, _manifest(engine_commit="9" * 40)).startswith(
        "the engine's commit changed"
    )
    assert rm.difference(m, _manifest(nev={"version": "0.1.0", "key": "fedcba9876543210"})) == (
        "nev changed (key 0123456789abcdef pinned, fedcba9876543210 now)"
    )
    # the fingerprint is recorded, not checked (a pool's replicas name themselves)
    fp = replace(m, aliases=(replace(m.aliases[0], fingerprint="stand-in-gpu0-r1"), m.aliases[1]))
    assert rm.difference(m, fp) is None


def test_a_manifest_is_written_once_read_only_and_never_over_other_bytes(tmp_path):
    m = _manifest()
    p = tmp_path / "b1" / rm.NAME
    sha = rm.write(p, m)
    assert (
        sha == rm.digest(m) and p.read_bytes() == rm.text(m) and (p.stat().st_mode & 0o777) == 0o444
    )
    assert rm.write(p, _manifest()) == sha  # the same bytes again: left as it is
    with pytest.raises(ConfigError, match="a run manifest with other inputs is already there"):
        rm.write(p, _manifest(seed_base="16"))
    assert p.read_bytes() == rm.text(m)
    assert rm.load(p) == m
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": 1, "function": "f"}')
    with pytest.raises(ConfigError, match=r"bad\.json: field spec"):
        rm.load(bad)


def test_the_model_of_each_alias_is_read_from_the_gateways_model_list_and_nothing_else():
    info = {"data": [
        {"model_name": "qwen3.8-27b-fast", "litellm_params": {
            "model": "openai/qwen3.8-27b-fast", "api_base": "http://198.18.9.30:8100/v1"}},
        {"model_name": "gpu2-alias", "litellm_params": {"model": "openai/b"}},
        {"model_name": "gpu2-alias", "litellm_params": {"model": "openai/a"}},
        {"model_name": "broken", "litellm_params": "x"}, ["junk"], {"litellm_params": {}}]}
    got = rm.deployments(info)
    assert got == {"qwen3.8-27b-fast": "openai/qwen3.8-27b-fast", "gpu2-alias": "openai/a,openai/b"}
    assert "198.18" not in repr(got)
    assert rm.deployments({"data": "nope"}) == {} and rm.deployments([]) == {}
