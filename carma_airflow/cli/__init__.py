"""The ``carma`` command line.  Every error is one line that says what to fix, exit code 2.

A reader that goes away (``carma why X | head -1``) ends the command quietly with exit code 0,
as ``git log | head`` does (:func:`closed_pipe`).
"""

from __future__ import annotations

import importlib
import os
import sys
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


def closed_pipe() -> NoReturn:
    """Our reader closed the pipe: stop writing and exit 0, without a word.

    Standard output is pointed at ``/dev/null`` first, so that the interpreter's last flush of
    what is still buffered does not fail a second time (Python then prints "Exception ignored"
    and exits 120).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file behind stdout (a test's runner)
        pass
    raise SystemExit(0)


def _flush_or_quiet() -> None:
    """Flush what is buffered while the command still decides its exit; a closed pipe: exit 0."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        closed_pipe()
    except (OSError, ValueError, AttributeError):  # stdout closed or replaced: nothing to flush
        pass


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {one_line(message)}", err=True)
    raise typer.Exit(code)


@contextmanager
def _usage_errors_on_one_line() -> Iterator[None]:
    """Click's usage errors (unknown option, bad value, no such command) as ``error: ...`` too."""
    try:
        yield
    except BrokenPipeError:  # the help, or a command's output, to a reader that went away
        closed_pipe()
    except _CLICK.ClickException as exc:
        no_args = getattr(_CLICK, "NoArgsIsHelpError", None)
        if no_args is not None and isinstance(exc, no_args):
            raise  # ``carma`` alone prints the help
        ctx = getattr(exc, "ctx", None)
        path = ctx.command_path if ctx is not None else "carma"
        fail(f"{exc.format_message()} (see {path} --help)", code=exc.exit_code)


def _rich_pipes_exit_quietly() -> None:
    """Rich (our tables, typer's help) meets a closed pipe with its own exit code 1; make it ours, 0.

    ``Console.on_broken_pipe`` is rich's documented hook for this; set once, by the command line only."""
    from rich.console import Console

    def quietly(console: Console) -> None:
        console.quiet = True  # nothing more from this console
        closed_pipe()

    if hasattr(Console, "on_broken_pipe"):
        Console.on_broken_pipe = quietly  # type: ignore[method-assign, assignment]


class OneLineErrorGroup(TyperGroup):
    """The ``carma`` group: errors from parsing the command line are one line on stderr, like ours."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _rich_pipes_exit_quietly()  # the first thing every invocation runs, `airflow carma ...` too
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
        except BrokenPipeError:  # `carma why X | head -1`: not an error of ours
            closed_pipe()
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
    try:
        app(prog_name="carma")
    finally:  # output still buffered meets a closed pipe here, not at the interpreter's exit
        _flush_or_quiet()


if __name__ == "__main__":  # pragma: no cover
    main()
