"""How every run of the CLI ends: its output written whatever the terminal's encoding, and every failure
turned into one line on stderr and an exit code, in one place (OneLineErrors).

Exit codes: 0 ok, 1 a check failed (verify found a mismatch, measure a cache off its prediction), 2 bad
input, an unreachable source or unwritable output, 3 an internal error (a bug), 130 interrupted, 141
the reader closed the pipe; every error is one line on stderr (KIMICOUNT_DEBUG=1 shows the traceback
before it, and the exit code stays the same).
"""

from __future__ import annotations

import codecs
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, TextIO

import typer
from typer.core import TyperGroup

from kimicount.errors import KimicountError
from kimicount.reading import printable


class OneLineErrors(TyperGroup):
    """Every error ends the same way, in this one place: one line on stderr. Bad input and unreachable
    sources (KimicountError) and typer's usage errors (a bad option value, an unknown command, which
    typer would draw as a boxed panel) print `kimicount: error: …` and exit 2; so does output that
    cannot be written (a full disk). Ctrl-C prints `kimicount: interrupted` and exits 130; a reader that
    closes the pipe early (`| head`) ends the run quietly with 141, as SIGPIPE does to other commands.
    An unexpected exception prints `kimicount: internal error: …` and exits 3. KIMICOUNT_DEBUG=1 shows
    the traceback first, and keeps the exit code. An unknown option or command that names training or
    fine-tuning (--lora, --finetune) is answered with what kimicount does and does not do."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **kwargs: Any,
    ):
        kwargs.update(prog_name=prog_name, complete_var=complete_var, windows_expand_args=windows_expand_args)
        if not standalone_mode:
            return super().main(args, standalone_mode=False, **kwargs)
        degrade_unencodable_output()
        stdout, sys.stdout = sys.stdout, _Output(sys.stdout)
        try:
            # Not standalone: typer raises its usage errors instead of printing them, and returns the
            # exit code of typer.Exit (or the command's return value, None) instead of exiting.
            code = super().main(args, standalone_mode=False, **kwargs)
            sys.stdout.flush()  # a closed pipe or a full disk shows here, not at interpreter exit
            code = code if isinstance(code, int) else 0
        except OutputError as error:
            if error.closed:  # the reader has gone: nothing to say, and no one to say it to on stdout
                _silence(stdout)
                code = CLOSED_PIPE
            else:
                code = _fail(f"kimicount: error: cannot write the output: {error.reason}")
        except KimicountError as error:  # bad input or an unreachable source
            if os.environ.get("KIMICOUNT_DEBUG"):
                traceback.print_exc()  # then the same exit code: the traceback adds, never changes it
            code = _fail(f"kimicount: error: {' '.join(str(error).splitlines())}")
        except typer.TyperException as error:
            code = 2
            if error.format_message():  # empty when typer has printed the help (no arguments given)
                words = list(sys.argv[1:] if args is None else args)
                command = " ".join(["kimicount", *[w for w in words if w in self.commands][:1]])
                unknown = getattr(error, "option_name", None) or _unknown_command(error, words)
                if unknown and _not_covered(unknown):
                    say(f"kimicount: error: {unknown}: {NOT_COVERED} (see kimicount --help)")
                else:
                    # with no arguments, the message is the whole help (click's), whose lines are kept
                    message = f"kimicount: error: {error.format_message()} (see {command} --help)"
                    say(message, keep="\n" if not words else "")
        except (typer.Abort, KeyboardInterrupt):
            code = INTERRUPTED
        except Exception as error:  # noqa: BLE001 - a bug: say so in one line, not a traceback
            if os.environ.get("KIMICOUNT_DEBUG"):
                traceback.print_exc()
            message = " ".join(str(error).split()) or "no message"
            say(
                f"kimicount: internal error: {type(error).__name__}: {message} "
                "(please report it; KIMICOUNT_DEBUG=1 shows the traceback)"
            )
            code = 3
        finally:
            sys.stdout = stdout
        if code == INTERRUPTED:  # typer turns a KeyboardInterrupt anywhere in the command into Exit(130)
            say("kimicount: interrupted")
        _exit(code)


#: What kimicount does not cover, as an unknown option that names it is answered (--lora, --finetune).
NOT_COVERED = (
    "kimicount does not cover training or fine-tuning memory (optimizer states, gradients, activations "
    "kept for the backward pass, adapters such as LoRA); it counts parameters and sizes inference: "
    "weights, the KV cache and serving plans"
)

#: Words in an unknown option or command that name training or fine-tuning.
_TRAINING_WORDS = ("lora", "peft", "finetun", "fine-tun", "fine_tun", "train", "optimizer", "gradient")


def _not_covered(word: str) -> bool:
    """Whether an unknown option or command names what kimicount does not cover.

    >>> _not_covered("--lora"), _not_covered("--fine-tune"), _not_covered("--training"), _not_covered("--tokns")
    (True, True, True, False)
    """
    folded = word.lower()
    return any(part in folded for part in _TRAINING_WORDS)


def _unknown_command(error: Exception, words: Sequence[str]) -> str | None:
    """The word an unknown-command error is about (`kimicount finetune`), or None."""
    message = error.format_message() if isinstance(error, typer.TyperException) else ""
    if not message.startswith("No such command"):
        return None
    return next((w for w in words if not w.startswith("-")), None)


def _fail(line: str) -> int:
    say(line)
    return 2


def _exit(code: int) -> None:
    """End the run with `code`. When a Hub operation left threads running (its deadline passed, Ctrl-C,
    or one request failed while others were still out), the process ends at once (os._exit, once the
    output is flushed): the interpreter's shutdown would otherwise wait for huggingface_hub's clean-up
    beside those threads, and can crash tearing it down."""
    transport = sys.modules.get("kimicount.hub_transport")  # imported only when a Hub was used
    if transport is not None and transport.abandoned and sys.stdout is sys.__stdout__:  # not a test's capture
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)


#: The exit code of a run ended by Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130
#: The exit code of a run whose reader closed the pipe (128 + SIGPIPE, as other commands end).
CLOSED_PIPE = 141


class OutputError(Exception):
    """Writing to stdout failed: the reader closed the pipe (`closed`), or the disk is full."""

    def __init__(self, error: OSError):
        super().__init__(error)
        self.closed = isinstance(error, BrokenPipeError)
        self.reason = error.strerror or str(error)


class _Output:
    """stdout as the commands see it: whatever writes (rich, typer.echo), a failed write becomes one
    OutputError, which typer passes through (it would turn a closed pipe into exit 1, the code that
    means a mismatch). Everything else is the stream's own."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise OutputError(error) from error

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise OutputError(error) from error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _silence(stream: TextIO) -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail on the closed pipe
    again (Python's own advice for SIGPIPE)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor: a test runner's buffer
        pass


def say(line: str, keep: str = "") -> None:
    """One line on stderr, what a terminal would act on in it escaped (an ESC from a file name shows as
    \\x1b; kimicount.reading.printable, `keep` as there); a closed stderr loses it rather than raising a
    second error: a pipe whose reader has gone, or no stderr at all (`2>&-`, where Python sets
    sys.stderr to None)."""
    if sys.stderr is None:
        return
    try:
        sys.stderr.write(printable(line, keep) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


#: What each character the reports print becomes on a terminal or file that cannot encode it
#: (PYTHONIOENCODING=ascii or latin-1): rich already draws its boxes and tree guides in ASCII there;
#: these are the characters of our own text. Anything else becomes "?".
ASCII_FALLBACK = {
    "×": "x",
    "·": "*",
    "–": "-",
    "—": "--",
    "−": "-",
    "…": "...",
    "≈": "~",
    "≤": "<=",
    "≥": ">=",
    "²": "^2",
    "Σ": "sum",
    "✓": "ok",
    "✗": "X",
    "█": "#",
    "─": "-",
    "│": "|",
    "├": "|",
    "└": "`",
}


def _ascii_fallback(error: UnicodeError) -> tuple[str, int]:
    assert isinstance(error, UnicodeEncodeError)
    text = error.object[error.start : error.end]
    return "".join(ASCII_FALLBACK.get(c, "?") for c in text), error.end


def degrade_unencodable_output() -> None:
    """Let stdout and stderr write what their encoding cannot hold as ASCII look-alikes (× as x)
    instead of failing with UnicodeEncodeError: one codec error handler, for every writer."""
    codecs.register_error("kimicount-ascii", _ascii_fallback)
    # Python's own defaults (stderr's is backslashreplace, which would print \u2212); not a handler the
    # user chose in PYTHONIOENCODING.
    for stream, default in ((sys.stdout, "strict"), (sys.stderr, "backslashreplace")):
        if hasattr(stream, "reconfigure") and getattr(stream, "errors", default) == default:
            stream.reconfigure(errors="kimicount-ascii")


EXIT_CODES = (
    "Exit codes: 0 ok; 1 a check failed (verify: a mismatch; measure: a cache off its prediction); "
    "2 bad input, an unreachable source or unwritable output; 3 an internal error (a bug); "
    "130 interrupted; 141 the reader closed the pipe."
)
