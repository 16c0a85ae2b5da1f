"""Settings: NEV_* first, legacy GENERA_* as fallback, defaults defined once."""

import ast
import re
from pathlib import Path

import pytest

from lanes.base import settings
from lanes.base.errors import ConfigError
from rig.docgen import render


def test_nev_name_wins_over_legacy():
    env = {"NEV_LANE_FETCH_MAX_AGE": "30", "GENERA_LANE_FETCH_MAX_AGE": "99"}
    assert settings.get_int(settings.LANE_FETCH_MAX_AGE, env) == 30


def test_legacy_genera_name_read_when_nev_unset():
    env = {"GENERA_LANE_FETCH_MAX_AGE": "99"}
    assert settings.get_int(settings.LANE_FETCH_MAX_AGE, env) == 99


def test_legacy_read_when_nev_is_empty():
    env = {"NEV_MODELS": "", "GENERA_MODELS": "a:1:1"}
    assert settings.get(settings.MODELS, env) == "a:1:1"


def test_default_when_neither_set():
    assert settings.get_int(settings.LANE_FETCH_MAX_AGE, {}) == 600
    assert settings.get_int(settings.LANE_MIN_FREE_GB, {}) == 20
    assert settings.get(settings.LANE_SSH, {}) is None


def test_bad_number_names_the_variable():
    with pytest.raises(ConfigError) as e:
        settings.get_int(settings.LANE_MIN_FREE_GB, {"NEV_LANE_MIN_FREE_GB": "lots"})
    assert "NEV_LANE_MIN_FREE_GB" in str(e.value) and "lots" in str(e.value)


def test_flag_values():
    assert settings.get_flag(settings.LANE_STRICT, {"NEV_LANE_STRICT": "1"})
    assert not settings.get_flag(settings.LANE_STRICT, {"NEV_LANE_STRICT": "0"})
    assert settings.get_flag(settings.LANE_STRICT, {"GENERA_LANE_STRICT": "yes"})


def test_every_setting_is_a_nev_name_with_a_genera_legacy():
    names = [s.name for s in settings.all_settings()]
    assert len(names) == len(set(names))
    for s in settings.all_settings():
        assert s.name.startswith("NEV_")
        assert s.legacy == "GENERA_" + s.name[4:]


def test_settings_doc_is_generated_from_the_registry():
    with open("docs/settings.md", encoding="utf-8") as f:
        assert f.read() == render(), "docs/settings.md is stale: python -m rig.docgen > docs/settings.md"


def test_a_setting_registered_twice_is_refused():
    before = [s.name for s in settings.all_settings()]
    with pytest.raises(ValueError, match="NEV_CORPUS_DIR is registered twice"):
        settings._s("NEV_CORPUS_DIR", "elsewhere", "a second meaning")
    assert [s.name for s in settings.all_settings()] == before
    assert settings.CORPUS_DIR.default == "corpus"


def test_value_and_path_give_the_default_and_refuse_a_setting_without_one(tmp_path):
    assert settings.value(settings.BOX_LANES, {}) == "lxc"     # the box's lanes are LXC guests unless set
    assert settings.path(settings.STATE_DIR, {"NEV_STATE_DIR": "~/st"}).is_absolute()
    assert settings.path_under(settings.CORPUS_DIR, tmp_path, {}) == tmp_path / "corpus"
    assert settings.path_under(settings.CORPUS_DIR, tmp_path, {"NEV_CORPUS_DIR": "/abs"}) == Path("/abs")
    with pytest.raises(ConfigError, match="NEV_LANE_SSH is not set"):
        settings.value(settings.LANE_SSH, {})


def test_given_ignores_the_default():
    assert settings.given(settings.BOX_NAME, {}) is None
    assert settings.given(settings.BOX_NAME, {"GENERA_BOX_NAME": "old"}) == "old"


CODE = ("bench", "jobs", "lanes", "rig", "dagu", "crates_bridge")
# The lane agent is stdlib-only and shipped alone (no registry on a lane's bare python3);
# the box gateway's auth module is source written for LiteLLM's process, not ours; lanes/quick.py
# runs before any module of nev is imported (its one read: NEV_ON_LANE, as settings reads it).
# lanes/base/config.py: NEV_CONFIG names the file the settings are read from (below settings)
DIRECT_READ_EXEMPT = {"lanes/agent/copy.py", "rig/box/gateway.py", "lanes/quick.py",
                      "lanes/base/config.py"}


def _sources():
    root = Path(__file__).resolve().parent.parent
    for pkg in CODE:
        for f in sorted((root / pkg).rglob("*.py")):
            if "perf" in f.parts or "target" in f.parts:
                continue
            yield f.relative_to(root).as_posix(), f.read_text(encoding="utf-8")


def test_no_module_reads_a_nev_variable_from_the_environment_directly():
    """Read, not written: a child's environment may be given NEV_* values (`env["NEV_X"] = ...`)."""
    direct = re.compile(r"""(\.get\(|getenv\(|\[)\s*["'](NEV|GENERA)_[A-Z_]*["']\s*(?!\]\s*=[^=])""")
    found = [f"{name}:{n}" for name, text in _sources() if name not in DIRECT_READ_EXEMPT
             for n, line in enumerate(text.splitlines(), 1) if direct.search(line)]
    assert not found, "read these through lanes.base.settings: " + ", ".join(found)


def test_no_call_site_repeats_a_default():
    """`settings.get(X) or "literal"` where X has a default: the literal is a second default."""
    readers = {"get", "get_path"}
    found = []
    for name, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)):
                continue
            for read in node.values[:-1]:  # a reader (or a setting's .default) followed by a fallback
                if (isinstance(read, ast.Call) and isinstance(read.func, ast.Attribute)
                        and read.func.attr in readers and read.args):
                    setting = read.args[0]
                elif isinstance(read, ast.Attribute) and read.attr == "default":
                    setting = read.value
                else:
                    continue
                if (isinstance(setting, ast.Attribute)
                        and isinstance(getattr(settings, setting.attr, None), settings.Setting)
                        and getattr(settings, setting.attr).default is not None):
                    found.append(f"{name}:{node.lineno}")
    assert not found, "use settings.value/path (the registry's default): " + ", ".join(found)
