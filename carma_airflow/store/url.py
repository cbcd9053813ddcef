"""Store URLs without SQLAlchemy: the default location and password masking for messages."""

from __future__ import annotations

import os
import re

# Greedy up to the last "@" of the line: a password that holds "@" or a raw space is masked
# whole (over-masking is safe).
_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)[^\r\n]*@")


def default_url(airflow_home: str) -> str:
    """The default store: ``sqlite:///{airflow_home}/carma.db`` (``~`` expanded)."""
    home = os.path.expanduser(airflow_home).rstrip("/")
    return f"sqlite:///{home}/carma.db"


def mask_password(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for URLs SQLAlchemy could not parse)."""
    return _PASSWORD.sub(r"\g<head>***@", url)
