"""The ``carma`` command line.  Every error is one line that says what to fix, exit code 2."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import typer

from carma_airflow.core.errors import CarmaError

F = TypeVar("F", bound=Callable[..., Any])

app = typer.Typer(
    name="carma",
    help="Collocation-aware GPU placement for Airflow: simulate and compare placement policies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def one_line_errors(func: F) -> F:
    """Turn CarmaError (and, unless CARMA_DEBUG is set, anything else) into one line on stderr."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except CarmaError as exc:
            fail(str(exc))
        except Exception as exc:
            if os.environ.get("CARMA_DEBUG"):
                raise
            fail(f"unexpected {type(exc).__name__}: {exc} (set CARMA_DEBUG=1 for a traceback and report it)", 1)
        return None

    return wrapper  # type: ignore[return-value]


def _register() -> None:
    from carma_airflow.cli import agent as _agent  # noqa: F401
    from carma_airflow.cli import ops as _ops  # noqa: F401  (registers commands)
    from carma_airflow.cli import simulate as _simulate  # noqa: F401


def main() -> None:
    _register()
    app(prog_name="carma")


if __name__ == "__main__":  # pragma: no cover
    main()
