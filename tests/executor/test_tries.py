"""A try's state machine (executor/tries/book.py): the moves it makes, the ones it refuses, the views."""

from __future__ import annotations

import pytest

from carma_airflow.executor.tries import Try, TryBook, TryState, TryStateError


def _try(key: str, state: TryState = TryState.DEFERRED) -> Try:
    return Try(key=key, rkey=f"d/{key}/r/-1/1", ti=None, state=state)


def test_a_try_goes_deferred_waiting_running_ended_and_the_views_follow() -> None:
    book = TryBook()
    t = book.add(_try("a"))
    assert dict(book.in_state(TryState.DEFERRED)) == {"a": t}
    for state in (TryState.WAITING, TryState.RUNNING):
        book.move(t, state)
        assert t.state is state and list(book.in_state(state)) == ["a"]
        assert all("a" not in book.in_state(s) for s in TryState if s is not state)
    book.move(t, TryState.ENDED)
    assert "a" not in book and len(book) == 0


@pytest.mark.parametrize(
    ("start", "to"),
    [
        (TryState.DEFERRED, TryState.RUNNING),  # never placed without a plan
        (TryState.RUNNING, TryState.WAITING),
        (TryState.REFUSED, TryState.RUNNING),
        (TryState.ENDED, TryState.WAITING),
    ],
)
def test_moves_the_machine_does_not_make_are_refused(start: TryState, to: TryState) -> None:
    book = TryBook()
    t = _try("a", start)
    if start is not TryState.ENDED:
        book.add(t)
    with pytest.raises(TryStateError, match=f"{start.value} -> {to.value}"):
        book.move(t, to)


def test_an_orphan_is_known_by_request_key_until_adopted() -> None:
    book = TryBook()
    orphan = book.add(Try(key=None, rkey="d/t/r/-1/1", ti=None, state=TryState.ORPHAN))
    assert book.orphan("d/t/r/-1/1") is orphan and list(book.holding_gpus()) == [orphan]
    orphan.key = "ti-key"
    book.move(orphan, TryState.RUNNING)
    assert book.get("ti-key") is orphan and book.orphan("d/t/r/-1/1") is None
    assert list(book.holding_gpus()) == [orphan]


def test_the_book_names_a_handed_over_try_by_its_request_key_until_it_is_taken_back() -> None:
    """What the placer's results name tries by (request keys) is read from the book, which
    forgets it as the try leaves it: nothing of an ended try is kept (issue 24, one owner)."""
    book = TryBook()
    t = book.add(_try("a"))
    for state in (TryState.WAITING, TryState.RUNNING):
        assert book.handed(t.rkey) is t
        book.move(t, state)
    book.move(t, TryState.STOPPING)  # revoked: the same key may be handed over again at once
    assert book.handed(t.rkey) is None
    again = book.add(_try("a"))
    assert book.handed(t.rkey) is again
    book.move(again, TryState.ENDED)  # withdrawn
    book.move(t, TryState.ENDED)
    assert book.handed(t.rkey) is None and len(book) == 0
    orphan = book.add(Try(key=None, rkey="d/o/r/-1/1", ti=None, state=TryState.ORPHAN))
    assert book.handed(orphan.rkey) is None  # not handed over yet
    orphan.key = "o"
    book.move(orphan, TryState.RUNNING)  # adopted
    assert book.handed(orphan.rkey) is orphan
    book.move(orphan, TryState.ENDED)
    assert book.handed(orphan.rkey) is None


def test_a_key_handed_over_twice_is_refused() -> None:
    book = TryBook()
    book.add(_try("a"))
    with pytest.raises(TryStateError, match="already known"):
        book.add(_try("a"))


def test_views_are_read_only() -> None:
    book = TryBook()
    book.add(_try("a"))
    with pytest.raises(TypeError):
        book.in_state(TryState.DEFERRED)["b"] = _try("b")  # type: ignore[index]


def test_a_started_try_taken_back_frees_its_key_while_it_stops() -> None:
    book = TryBook()
    first = book.add(_try("a"))
    for state in (TryState.WAITING, TryState.RUNNING):
        book.move(first, state)
    assert list(book.started()) == ["a"]
    book.move(first, TryState.STOPPING)  # revoked: its process is being reaped
    assert "a" not in book and book.get("a") is None and list(book.started()) == []
    assert dict(book.in_state(TryState.STOPPING)) == {first.rkey: first} and list(book.holding_gpus()) == [first]
    again = book.add(_try("a"))  # the scheduler hands the same key over again: a new try
    assert book.get("a") is again and len(book) == 2
    with pytest.raises(TryStateError, match="stopping -> running"):
        book.move(first, TryState.RUNNING)
    book.move(first, TryState.ENDED)
    assert book.get("a") is again and len(book) == 1 and not book.in_state(TryState.STOPPING)


def test_a_refused_or_orphaned_try_can_be_stopped_and_a_key_stops_once() -> None:
    book = TryBook()
    refused = book.add(_try("r"))
    book.move(refused, TryState.REFUSED)
    assert list(book.started()) == ["r"]
    book.move(refused, TryState.STOPPING)
    orphan = book.add(Try(key=None, rkey="d/o/r/-1/1", ti=None, state=TryState.ORPHAN))
    book.move(orphan, TryState.STOPPING)  # superseded before the scheduler handed it over
    assert set(book.in_state(TryState.STOPPING)) == {refused.rkey, orphan.rkey}
    same = book.add(_try("r"))
    for state in (TryState.WAITING, TryState.RUNNING):
        book.move(same, state)
    with pytest.raises(TryStateError, match="stopping already"):
        book.move(same, TryState.STOPPING)  # two processes of one try: a bug, refused


def test_the_earlier_tries_of_a_task_instance_and_a_newer_try_stopping_those_that_run() -> None:
    from carma_airflow.executor.flow.restart import StoredTi
    from carma_airflow.executor.tries import TakeBack

    book = TryBook()

    def held(task: str, number: int, state: TryState, run: str = "r") -> Try:
        ti = StoredTi("d", task, run, -1, number)
        rkey = f"d/{task}/{run}/-1/{number}"
        if state is TryState.ORPHAN:
            return book.add(Try(key=None, rkey=rkey, ti=ti, state=state))
        attempt = book.add(Try(key=rkey, rkey=rkey, ti=ti, state=TryState.DEFERRED))
        for step in (TryState.WAITING, TryState.RUNNING, TryState.STOPPING)[: 2 if state is TryState.RUNNING else 3]:
            book.move(attempt, step)
        return attempt

    one, two, three = held("t", 1, TryState.RUNNING), held("t", 2, TryState.STOPPING), held("t", 3, TryState.ORPHAN)
    others = [held("u", 1, TryState.RUNNING), held("t", 1, TryState.RUNNING, run="r2")]  # another task, another run
    newer = book.add(Try(key="new", rkey="d/t/r/-1/4", ti=StoredTi("d", "t", "r", -1, 4), state=TryState.DEFERRED))
    assert book.earlier(newer) == [one, three, two]  # running, adopted or not, then being stopped
    assert book.earlier(one) == [] and book.waits_for_earlier(newer) and not book.waits_for_earlier(one)
    TakeBack(book, lambda attempt, ended: None, lambda attempt, why: None).stop_superseded(newer)
    assert [t.state for t in (one, two, three)] == [TryState.STOPPING] * 3  # the one stopping already: left as is
    assert [t.state for t in others] == [TryState.RUNNING] * 2
