"""Settings: NEV_* first, legacy GENERA_* as fallback, defaults defined once."""

import pytest

from lanes import settings
from lanes.errors import ConfigError
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
