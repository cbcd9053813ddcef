"""Every `carma` command in a pipe whose reader went away (`carma why X | head -1`): exit 0, nothing
said of the pipe.

The reader's end of a real pipe is closed before the command writes, so each write meets EPIPE as
it does after `head -1` has read its line (a real pipe, not a test runner's buffer).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from test_ops import CARMA, carma, env  # noqa: F401  (the fixture: a store with a running and a waiting try)

COMMANDS = [
    ("why", "train.bert"),
    ("why", "train.gpt", "--json"),
    ("gpus",),
    ("gpus", "--json"),
    ("placements",),
    ("placements", "--json"),
    ("model",),
    ("hosts",),
    ("--help",),
]


def _into_closed_pipe(environ: dict[str, str], *args: str) -> tuple[int, str]:
    proc = subprocess.Popen([CARMA, *args], env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command has written anything
    try:
        err = proc.stderr.read().decode(errors="replace")
        return proc.wait(timeout=120), err
    finally:
        proc.stderr.close()


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_closed_pipe_ends_the_command_quietly(env: dict[str, str], args: tuple[str, ...]) -> None:  # noqa: F811
    code, err = _into_closed_pipe(env, *args)
    assert code == 0, err
    # a note the command gives on stderr anyway may stay; nothing about the pipe
    assert not any(word in err for word in ("Broken", "Traceback", "unexpected", "Exception ignored", "error")), err


def test_json_output_is_whole_when_nothing_cuts_it(env: dict[str, str]) -> None:  # noqa: F811
    for args in (("placements", "--json"), ("gpus", "--json"), ("why", "train.bert", "--json")):
        out = carma(env, *args)
        assert out.returncode == 0, out.stderr
        assert isinstance(json.loads(out.stdout), list)  # one document, ending where the output ends
