"""Keys of an ``executor_config`` that carma would otherwise ignore: typos, named with the nearest valid key.

A key carma does not know buys the very OOM carma exists to prevent: ``{"carma": {"memroy": "20GiB"}}``
runs on the floor.  So :func:`key_problems` names each unknown key in the ``carma`` section, a near miss of
the section itself (``crama``, ``Carma``) and a field written outside the section (``{"memory": ...}``),
each with the nearest valid key.  ``[carma] allow_unknown_keys = True`` keeps them (task_config.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from carma_airflow.core.errors import brief

SECTION = "carma"
ALLOW_OPTION = "[carma] allow_unknown_keys = True"  # how a team that must keeps unknown keys
_SECTION_CUTOFF = 0.75  # 'crama', 'karma', 'carm' are near misses; 'camera', 'cuda' are not
_KEY_CUTOFF = 0.6


def _plain(key: str) -> str:
    return key.strip().lower().replace("-", "_").replace(" ", "_")


def nearest(key: str, choices: Iterable[str]) -> str | None:
    """The valid key ``key`` most likely meant, or None when none is close.

    The same key in another case or with ``-`` for ``_`` first; then a valid key that starts
    ``key`` (``memory_limit``: ``memory``), the longest; then one ``key`` starts (``prio``:
    ``priority``), the shortest; then the closest spelling (``memroy``: ``memory``).
    """
    options = list(choices)
    plain = _plain(key)
    if not plain:
        return None
    for choice in options:
        if _plain(choice) == plain:
            return choice
    heads = [c for c in options if plain.startswith(_plain(c)) and len(c) >= 3]
    if heads:
        return max(heads, key=len)
    longer = [c for c in options if _plain(c).startswith(plain) and len(plain) >= 3]
    if longer:
        return min(longer, key=len)
    close = difflib.get_close_matches(plain, [_plain(c) for c in options], n=1, cutoff=_KEY_CUTOFF)
    if not close:
        return None
    return next(c for c in options if _plain(c) == close[0])


def _is_section_miss(key: str) -> bool:
    plain = _plain(key)
    return plain == SECTION or difflib.SequenceMatcher(None, plain, SECTION).ratio() >= _SECTION_CUTOFF


def section_problems(executor_config: Mapping[Any, Any], fields: tuple[str, ...], where: str) -> list[str]:
    """Top-level keys of ``executor_config`` meant for the ``carma`` section: a near miss of its name
    (``crama``, ``Carma``), or one of its fields written outside it (``{"memory": "20GiB"}``)."""
    problems = []
    for key in executor_config:
        if not isinstance(key, str) or key == SECTION:
            continue
        if _is_section_miss(key):
            problems.append(
                f"{where}: unknown section {brief(key, 40)}; did you mean {SECTION!r}? write"
                f" executor_config={{'carma': {{...}}}} (or {ALLOW_OPTION} to keep unknown keys)"
            )
        elif key in fields:
            problems.append(
                f"{where}: {key!r} is outside the 'carma' section, where carma does not read it; write"
                f" executor_config={{'carma': {{{key!r}: ...}}}}"
            )
    return problems


def unknown_key_problems(block: Mapping[Any, Any], fields: tuple[str, ...], where: str) -> list[str]:
    """One problem per string key of the ``carma`` section that is not one of ``fields``."""
    problems = []
    for key in block:
        if not isinstance(key, str) or key in fields:
            continue  # a non-string key: the model's own check names it
        near = nearest(key, fields)
        guess = f"; did you mean {near!r}? write {near}=..." if near else f"; write one of {', '.join(fields)}"
        keep = f" (or {ALLOW_OPTION} to keep unknown keys)"
        problems.append(f"{where}['carma']: unknown key {brief(key, 40)}{guess}{keep}")
    return problems


__all__ = ["ALLOW_OPTION", "SECTION", "nearest", "section_problems", "unknown_key_problems"]
