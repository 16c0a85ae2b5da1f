"""The one reader of a YAML document nev reads (a job's manifest, a spec's front matter, a serving
config on a rig host): strict, bounded, and one line naming the place on every refusal.

| in the document                          | refused as (line and column where known)      |
|------------------------------------------|-----------------------------------------------|
| not YAML, or a tag the safe loader does  | `is not valid YAML at line L, column C (...)` |
| not know (`!!python/...`)                |                                               |
| a key twice in one mapping               | `has the key K twice (line L, column C; ...)` |
| aliases expanding past `MAX_NODES` (a    | `has aliases that expand to more than N ...`  |
| "billion laughs" bomb), or more aliases  | `uses more than N aliases`                    |
| than `MAX_ALIASES`; an alias inside what | `has an alias inside the value it names`      |
| it names                                 |                                               |
| nesting deeper than Python can read      | `is nested too deeply to read`                |
| a value a constructor refuses            | `holds a value out of range`                  |

The alias bound is checked on the composed graph, before any value is built or walked: each node's
expanded size is counted once (a bomb's graph is small; its expansion is not).
"""

from __future__ import annotations

from typing import Any

import yaml

from lanes.base import jsonfile
from lanes.base.errors import ConfigError

#: the most values a document may expand to through its aliases
MAX_NODES = 100_000
#: the most aliases (`*name`) one document may use
MAX_ALIASES = 1_000


class _Refused(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _at(mark: Any) -> str:
    return (
        f"line {mark.line + 1}, column {mark.column + 1}"
        if mark is not None
        else "an unknown place"
    )


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys and counting aliases."""

    aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise _Refused(f"uses more than {MAX_ALIASES} aliases")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                try:
                    key = self.construct_object(key_node, deep=True)
                    hash(key)
                except TypeError:
                    continue  # an unhashable key: the base class says so, with its place
                if key in seen:
                    raise _Refused(
                        f"has the key {str(key)[:60]!r} twice ({_at(key_node.start_mark)}; "
                        f"first at line {seen[key].line + 1}): keep one"
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_OPEN = -1


def _expanded(node: Any, memo: dict[int, int]) -> int:
    """How many values `node` stands for once every alias is followed (counted once per node)."""
    got = memo.get(id(node))
    if got == _OPEN:
        raise _Refused(
            f"has an alias inside the value it names ({_at(node.start_mark)}): a value that holds "
            "itself"
        )
    if got is not None:
        return got
    memo[id(node)] = _OPEN
    if isinstance(node, yaml.SequenceNode):
        n = 1 + sum(_expanded(c, memo) for c in node.value)
    elif isinstance(node, yaml.MappingNode):
        n = 1 + sum(_expanded(k, memo) + _expanded(v, memo) for k, v in node.value)
    else:
        n = 1
    memo[id(node)] = min(n, MAX_NODES + 1)
    return memo[id(node)]


def load(text: str, where: str, what: str) -> Any:
    """The YAML document in `text`, or ConfigError: `WHERE: WHAT ...; fix the file`."""
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)  # its reader refuses a character YAML does not allow, here
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded(node, {}) > MAX_NODES:
            raise _Refused(
                f"has aliases that expand to more than {MAX_NODES} values (an alias bomb)"
            )
        return loader.construct_document(node)
    except _Refused as e:
        raise ConfigError(f"{where}: the {what} {e.why}; fix the file") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = (e.problem or e.context or "not YAML").strip()
        raise ConfigError(
            f"{where}: the {what} is not valid YAML at {_at(mark)} ({problem}); fix the file"
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(
            f"{where}: the {what} is not valid YAML ({str(e).splitlines()[0]}); fix the file"
        ) from None
    except RecursionError:
        raise ConfigError(
            f"{where}: the {what} is nested too deeply to read (more than "
            f"{jsonfile.MAX_DEPTH} levels is refused); fix the file"
        ) from None
    except (
        ValueError
    ) as e:  # a value YAML's constructors refuse (an integer of thousands of digits)
        raise ConfigError(
            f"{where}: the {what} holds a value out of range ({str(e)[:60]}); fix the file"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
