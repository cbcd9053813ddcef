"""A second deployment booted beside a file's other tests: started and its runs triggered on a
thread of its own, so its boot and runs overlap the tests that run meanwhile (the e2e suite's
time: docs/measured.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from carma_airflow.dev.devstack import AirflowStack

T = TypeVar("T")


@contextmanager
def booted_beside(deployment: AirflowStack, boot: Callable[[], T], name: str) -> Iterator[Future[T]]:
    """``boot`` (start ``deployment``, trigger its runs, return their ids) on a thread named
    ``name``; the future of what it returns.  At the end a boot still going on (a test failed
    early) ends first, then the deployment stops (a teardown: no orderly hand-back needed)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=name) as pool:
        triggered = pool.submit(boot)
        try:
            yield triggered
        finally:
            triggered.exception()
            deployment.stop(grace_s=1.0)
