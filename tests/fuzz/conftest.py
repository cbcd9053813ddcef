"""Hypothesis settings for the fuzz suite (registered here, applied per test, not globally).

``carma-fuzz`` (CI, the default): derandomized, no example database, so every run tries the same
inputs; sized so the whole suite stays under a minute on a 2-core machine.  ``CARMA_FUZZ=deep``
switches the same name to a randomized run with ten times the examples, for hunting locally.
Tests pick it up with ``settings(settings.get_profile("carma-fuzz"), ...)``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_DEEP = os.environ.get("CARMA_FUZZ") == "deep"

settings.register_profile(
    "carma-fuzz",
    max_examples=2000 if _DEEP else 200,
    deadline=None,
    derandomize=not _DEEP,
    database=None,
    print_blob=True,
    # the CLI and executor properties use tmp_path / the executor fixture across examples on purpose
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
