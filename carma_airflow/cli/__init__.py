"""The ``carma`` command line.  Every error is one line that says what to fix, exit code 2."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from carma_airflow.core.errors import CarmaError

F = TypeVar("F", bound=Callable[..., Any])


def _click_exceptions() -> Any:
    """The click exceptions typer raises: its vendored copy (typer >= 0.26), else click's own."""
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            return importlib.import_module(name)
        except ImportError:  # pragma: no cover - depends on the typer release
            continue
    raise ImportError("typer without click exceptions")  # pragma: no cover


_CLICK = _click_exceptions()


def one_line(message: str) -> str:
    """``message`` on one line: line breaks (including user input echoed back) become spaces."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {one_line(message)}", err=True)
    raise typer.Exit(code)


@contextmanager
def _usage_errors_on_one_line() -> Iterator[None]:
    """Click's usage errors (unknown option, bad value, no such command) as ``error: ...`` too."""
    try:
        yield
    except _CLICK.ClickException as exc:
        no_args = getattr(_CLICK, "NoArgsIsHelpError", None)
        if no_args is not None and isinstance(exc, no_args):
            raise  # ``carma`` alone prints the help
        ctx = getattr(exc, "ctx", None)
        path = ctx.command_path if ctx is not None else "carma"
        fail(f"{exc.format_message()} (see {path} --help)", code=exc.exit_code)


class OneLineErrorGroup(TyperGroup):
    """The ``carma`` group: errors from parsing the command line are one line on stderr, like ours."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        with _usage_errors_on_one_line():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        with _usage_errors_on_one_line():
            return super().invoke(ctx)


app = typer.Typer(
    name="carma",
    help="Collocation-aware GPU placement for Airflow: simulate and compare placement policies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrorGroup,
)


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
    from carma_airflow.cli import hosts as _hosts  # noqa: F401
    from carma_airflow.cli import model as _model  # noqa: F401
    from carma_airflow.cli import ops as _ops  # noqa: F401  (registers commands)
    from carma_airflow.cli import simulate as _simulate  # noqa: F401


def main() -> None:
    _register()
    app(prog_name="carma")


if __name__ == "__main__":  # pragma: no cover
    main()
