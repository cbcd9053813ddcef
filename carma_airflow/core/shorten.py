"""A reason or summary made shorter by a rule, never cut mid-sentence: whole clauses, then a count.

A try's summary and a failure's message are clauses joined by ``; `` (or sentences by ``. ``).
:func:`whole_clauses` keeps the leading clauses that fit in ``most`` characters and says how many
it left out (``(+2 more clauses)``), so a reader sees where the text goes on (``carma why`` has
it whole).  A first clause longer than ``most`` alone is kept to its last whole word, with ``…``.
"""

from __future__ import annotations

import re

_BOUNDARY = re.compile(r"(?<=[;.])\s+")  # after '; ' or '. ': where one clause ends and the next starts
ELLIPSIS = "…"


def _more(left: int) -> str:
    return f" (+{left} more clause{'s' if left != 1 else ''})"


def whole_clauses(text: str, most: int) -> str:
    """``text`` on one line, at most ``most`` characters, cut only between clauses.

    Whole when it fits.  Otherwise the leading clauses that fit with the note ``(+N more
    clauses)``; if not even the first fits, the first clause to its last whole word and ``…``.
    """
    flat = " ".join(text.split())
    if len(flat) <= most:
        return flat
    parts = _BOUNDARY.split(flat)
    kept: list[str] = []
    for part in parts[:-1]:  # all of them would be the whole text, which does not fit
        candidate = " ".join([*kept, part]).rstrip(";.")
        if len(candidate) + len(_more(len(parts) - len(kept) - 1)) > most:
            break
        kept.append(part)
    if kept:
        return " ".join(kept).rstrip(";.") + _more(len(parts) - len(kept))
    head = flat[: max(1, most - len(ELLIPSIS))]
    if " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ;,.:") + ELLIPSIS


__all__ = ["ELLIPSIS", "whole_clauses"]
