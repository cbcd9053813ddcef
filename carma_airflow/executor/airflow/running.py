"""``running`` as Airflow reads it, derived from the try book rather than mirrored.

BaseExecutor keeps ``running`` as a set its subclasses add to and take from; the scheduler counts
it against ``[core] parallelism`` and ``has_task`` reads it.  CarmaExecutor's is a live view: the
book's started tries (placed, adopted, refused; not those taken back), the callbacks it runs,
and any key Airflow's own code adds (BaseExecutor's contract: ``add``, ``discard``, ``remove``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableSet
from typing import Any

from carma_airflow.executor.airflow.callbacks import CallbackRunner
from carma_airflow.executor.tries import STARTED, TryBook


class Running(MutableSet[Any]):
    """A live view; ``book()``: the executor's try book (None before its start)."""

    def __init__(self, book: Callable[[], TryBook | None], callbacks: Callable[[], CallbackRunner]) -> None:
        self._book, self._callbacks = book, callbacks
        self._added: set[Any] = set()

    def _keys(self) -> set[Any]:
        book = self._book()
        return {*(book.started() if book is not None else ()), *self._callbacks().keys(), *self._added}

    def __contains__(self, key: object) -> bool:
        if key in self._added or key in self._callbacks():
            return True
        book = self._book()
        attempt = book.get(key) if book is not None else None
        return attempt is not None and attempt.state in STARTED

    def __iter__(self) -> Iterator[Any]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def add(self, key: Any) -> None:
        self._added.add(key)

    def discard(self, key: Any) -> None:
        self._added.discard(key)

    def clear(self) -> None:
        self._added.clear()

    def __repr__(self) -> str:
        return f"Running({sorted(map(repr, self))})"


__all__ = ["Running"]
