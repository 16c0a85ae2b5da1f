"""nev's config file: one TOML file under $XDG_CONFIG_HOME/nev/ (`config.toml`; NEV_CONFIG names
another) holding what would otherwise take a dozen exports. Each key is a setting's short name
(NEV_LANE_JUMP is `lane_jump`), at the top or under a table that starts it (`[lane]` then
`jump = ...`); the environment overrides every value (`lanes.base.settings.given`), and `nev
settings` names the file as the value's source. A relative path in it is relative to the file.
Secrets are never in it: the settings that hold one have a `*_FILE` twin that names a file.

The file is read once per process (again when it changes); a malformed one is one line naming
the file, the line and column or the key (with the close known key for a typo), exit 1.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from lanes.base.errors import ConfigError

NAME = "config.toml"
_CACHE: dict[tuple[str, int, int], dict[str, str]] = {}


def path(environ: Mapping[str, str] | None = None) -> Path:
    """NEV_CONFIG, else $XDG_CONFIG_HOME/nev/config.toml, else ~/.config/nev/config.toml."""
    p = path_in(os.environ if environ is None else environ)
    return p if p is not None else Path(os.path.expanduser("~")) / ".config" / "nev" / NAME


def path_in(env: Mapping[str, str]) -> Path | None:
    """The config file of the environment `env` (its NEV_CONFIG, XDG_CONFIG_HOME or HOME); None
    when it names none of them (a mapping made up by a caller: no config file is read for it)."""
    named = env.get("NEV_CONFIG") or env.get("GENERA_CONFIG")
    if named:
        home = env.get("HOME")
        return Path(named.replace("~", home, 1) if home and named.startswith("~") else named)
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]) / "nev" / NAME
    if env.get("HOME"):
        return Path(env["HOME"]) / ".config" / "nev" / NAME
    return None


def values(p: Path, known: Mapping[str, bool]) -> dict[str, str]:
    """NEV_* name -> value, of the config file at `p` ({} when there is none); `known`: every
    setting it may hold (name -> whether it is a secret), from `lanes.base.settings`."""
    try:
        st = p.stat()
    except OSError:
        return {}
    key = (str(p), st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = parse(_read(p), p, known)
    return _CACHE[key]


def _read(p: Path) -> str:
    from lanes.base import jsonfile

    return jsonfile.read_text(p, "config file", "fix it, or move it away and run `nev config init`")


def parse(text: str, p: Path, known: Mapping[str, bool]) -> dict[str, str]:
    """The settings a config file's text gives, refused whole when one key or value is wrong."""
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}; fix the file") from None
    out: dict[str, str] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                _put(out, f"{key}_{sub}", v, p, f"[{key}] {sub}", known)
        else:
            _put(out, key, value, p, key, known)
    return out


def _put(out: dict[str, str], short: str, v: object, p: Path, where: str,
         known: Mapping[str, bool]) -> None:
    name = "NEV_" + short.upper()
    if name not in known:
        import difflib

        shorts = [n.removeprefix("NEV_").lower() for n in known]
        near = difflib.get_close_matches(short.lower(), shorts, 1, 0.7)
        hint = f"did you mean {near[0]}?" if near else "`nev settings` lists the settings"
        raise ConfigError(f"{p}: key {where} is not a setting ({hint}); fix the file")
    if known[name]:
        raise ConfigError(f"{p}: key {where} holds a secret, which never goes in the config file; "
                          f"put it in a file of mode 600 and name that file with {short}_file")
    if isinstance(v, bool):
        out[name] = "1" if v else ""
    elif isinstance(v, str | int | float):
        out[name] = str(v)
    else:
        raise ConfigError(f"{p}: key {where} is a {type(v).__name__}, not a string, number or "
                          "true/false; fix the file")
