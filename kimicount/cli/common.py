"""What the commands share: the option types (the model, counts, sizes, dtypes, --json), the warning for
an option a view ignores, the JSON printer, and the progress line while a model or checkpoint is read.

Counts, sizes and dtypes arrive as text, read by kimicount.options the same way in every command.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from kimicount.cli.exits import say
from kimicount.errors import UsageError
from kimicount.options import DTYPE_METAVAR, parse_count, vllm_reading
from kimicount.reading import printable, shorten

if TYPE_CHECKING:
    from rich.console import Console

    from kimicount.options import HubOptions
    from kimicount.spec import ModelSpec


def choices(enum: type[Enum]) -> str:
    """How --help shows an option's choices: [a|b|c], the style of every choice option."""
    return f"[{'|'.join(member.value for member in enum)}]"


#: How --help describes the model a command reads.
MODEL_HELP = (
    "A bundled model's name (kimicount models lists them: kimi-k2, deepseek-v3, ...) or a Hub repo id, "
    "as hf download takes it (the same as --repo). Default: the bundled moonshotai/Kimi-K2-Instruct."
)

ModelArgument = Annotated[
    str | None,
    typer.Argument(metavar="[MODEL]", help=MODEL_HELP, show_default=False),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", metavar="PATH", help="A config.json file, or a folder holding one.", show_default=False
    ),
]
RepoOption = Annotated[
    str | None,
    typer.Option(
        "--repo",
        metavar="ORG/NAME",
        help="A Hub repo id; only config.json is downloaded. Honours HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE "
        "and the Hub cache.",
        show_default=False,
    ),
]
RevisionOption = Annotated[
    str | None,
    typer.Option("--revision", metavar="REV", help="Branch, tag or commit of the repo.", show_default=False),
]
DtypeOption = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        metavar=DTYPE_METAVAR,
        help="Cache dtype, also as config.json (bfloat16) or safetensors (BF16) spell it. Default: the model's "
        "torch_dtype.",
        show_default=False,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        metavar="TOKEN",
        help="A Hugging Face token for --repo (default: HF_TOKEN, or the one `hf auth login` saved).",
        show_default=False,
    ),
]
TimeoutOption = Annotated[
    str | None,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="Give up on the Hub after this long, every request and retry together (default: "
        "KIMICOUNT_TIMEOUT, or 300).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the stable JSON report instead of tables.")]
ModelingOption = Annotated[
    Path | None,
    typer.Option(
        "--modeling",
        metavar="FILE",
        help="The model's modeling_deepseek.py, for the code evidence of show and explore (default: "
        "beside --config's config.json, or from the Hub at the config's commit with --repo).",
        show_default=False,
    ),
]

#: How --help describes the forms a count takes (--tokens, --batch, ...).
COUNTS = "128k = 128,000, 128K = 131,072 as vLLM reads them, 1e6"


def repo_id(model: str | None, repo: str | None) -> str | None:
    """The repo named positionally (as `hf download ORG/NAME`) or with --repo."""
    if model is not None and repo is not None and model != repo:
        raise UsageError(f"name the repo once: {model} or --repo {repo}, not both")
    return model if model is not None else repo


def warn(message: str) -> None:
    """One warning line on stderr (lost, not an error, when stderr is closed)."""
    say(f"kimicount: warning: {message}")


def ignored(ctx: typer.Context, why: str, *names: str) -> None:
    """One line on stderr naming the options among `names` (parameter names) that the user gave and the
    chosen view does not use: `why` says which view."""
    given = [
        "/".join(param.opts + param.secondary_opts)
        for param in ctx.command.params
        if param.name in names
        and (source := ctx.get_parameter_source(param.name)) is not None
        and source.name in ("COMMANDLINE", "ENVIRONMENT")
    ]
    if given:
        options = " and ".join([", ".join(given[:-1]), given[-1]] if len(given) > 1 else given)
        warn(f"{options} {'has' if len(given) == 1 else 'have'} no effect {why}")


def print_json(report: dict[str, Any]) -> None:
    """The report on stdout; where stdout cannot encode every character (PYTHONIOENCODING=ascii), the
    others are written as JSON's own escapes (\\u00d7), which read back exactly."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    text = json.dumps(report, indent=2, ensure_ascii=not encoding.startswith("utf"))
    # JSON escapes C0 controls itself; DEL, C1 controls (U+009B, which some terminals act on) and the
    # other characters kimicount.reading.printable escapes are written as JSON's \u escapes too (all
    # inside strings), which read back the same.
    sys.stdout.write(_NOT_ASCII_TEXT.sub(_json_escape, text) + "\n")


_NOT_ASCII_TEXT = re.compile("[^\x20-\x7e\n]")


def _json_escape(match: re.Match[str]) -> str:
    """A character as JSON writes it: itself when printable, else its \\u escape (a surrogate pair
    past U+FFFF)."""
    char = match.group()
    if char.isprintable():
        return char
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def end_check(
    ctx: typer.Context,
    ok: bool,
    as_json: bool,
    report_json: Callable[[], dict[str, Any]],
    render: Callable[[Console], None],
) -> NoReturn:
    """How a check (verify, gguf) ends: its JSON report (which holds every component, so --depth is
    said to do nothing) or its tables, then exit 0 when everything matched, 1 on any mismatch. Only the
    view asked for is built."""
    if as_json:
        ignored(ctx, "with --json (it holds every component)", "depth")
        print_json(report_json())
    else:
        from kimicount.render import make_console

        render(make_console())
    raise typer.Exit(0 if ok else 1)


#: The options that count tokens, as vLLM's --max-model-len and --max-num-batched-tokens do.
TOKEN_OPTIONS = frozenset({"--tokens", "--context", "--max-model-len", "--max-batched-tokens"})


def count(text: str, option: str) -> int:
    """A count option (options.parse_count). A token count written with a lower-case suffix gets one
    warning line saying how vLLM reads it and what the upper-case one would be (256k = 256,000 and
    256K = 262,144): the two are easily mixed up. It is said as the option is read, so a run that then
    fails prints it before its one error line: the error may be about that very number."""
    value = parse_count(text, option)
    if option in TOKEN_OPTIONS and (note := vllm_reading(text)):
        warn(note)
    return value


def count_or_none(text: str | None, option: str) -> int | None:
    """An optional count option: None when not given."""
    return None if text is None else count(text, option)


@dataclass(frozen=True)
class _Activity:
    hub: HubOptions | None  # None: no Hub named
    on_file: Callable[[str], None] | None  # called per local file read


def hub_timeout(option: str | None) -> float:
    """The Hub deadline [s]: --timeout, else KIMICOUNT_TIMEOUT (read only when a Hub is named), else
    300; errors name whichever was given.

    >>> hub_timeout("2.5"), hub_timeout(None) > 0
    (2.5, True)
    >>> hub_timeout("-1")
    Traceback (most recent call last):
    kimicount.errors.UsageError: --timeout -1: expected a positive number of seconds
    """
    from kimicount.options import DEFAULT_TIMEOUT

    if option is not None:
        text, shown = option, f"--timeout {shorten(option, 40)}"
    elif "KIMICOUNT_TIMEOUT" in os.environ:
        text = os.environ["KIMICOUNT_TIMEOUT"]
        shown = f"KIMICOUNT_TIMEOUT={shorten(text, 40)}"
    else:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        raise UsageError(f"{shown}: expected a number of seconds") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"{shown}: expected a positive number of seconds")
    return seconds


def _tokens_hint() -> str:
    """For --token given without --repo on a command that also has --tokens (kv-cache, flops, measure):
    the likelier intent, `--tokens 128k`."""
    from typer.main import get_current_context  # typer's own (it vendors click)

    ctx = get_current_context(silent=True)
    if ctx is None or not any("--tokens" in param.opts for param in ctx.command.params):
        return ""
    return " (it is a Hugging Face token); did you mean --tokens?"


@contextmanager
def progress(
    live: bool, repo: str | None, token: str | None, timeout: str | None, local_files: bool = False
) -> Iterator[_Activity]:
    """What a command is reading, said on stderr. On a terminal (and without --json), while a Hub repo
    or local checkpoint files are read: one transient line, what is being fetched from where or how many
    files have been read, with each Hub retry printed above it. Elsewhere: only the retries, one line
    each."""
    from kimicount.options import HubOptions, hub_limits

    if repo is None and token is not None:
        raise UsageError("--token needs --repo" + _tokens_hint())
    if repo is None and timeout is not None:  # as a view says of the options it does not use
        warn("--timeout has no effect without --repo (it bounds what is asked of the Hub)")

    def hub(status: Callable[[str], None], note: Callable[[str], None]) -> HubOptions | None:
        if repo is None:
            return None
        return HubOptions(token, hub_timeout(timeout), status, note, **hub_limits(os.environ))  # type: ignore[arg-type]

    def note_line(text: str) -> None:
        say(f"kimicount: {text}")

    if not (live and (repo is not None or local_files)):
        yield _Activity(hub(lambda _text: None, note_line), None)
        return
    from kimicount.render import make_console

    console = make_console(stderr=True)
    if not console.is_terminal:
        yield _Activity(hub(lambda _text: None, note_line), None)
        return
    from rich.markup import escape
    from rich.progress import Progress, SpinnerColumn, TextColumn

    columns = SpinnerColumn(), TextColumn("{task.description}")
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("Reading safetensors headers" if repo is None else "Starting")
        files = 0

        def on_file(_file: str) -> None:
            nonlocal files
            files += 1
            progress.update(task, description=f"Reading safetensors headers: {files:,} files")

        def status(text: str) -> None:
            progress.update(task, description=escape(printable(text[:1].upper() + text[1:])))

        def note(text: str) -> None:
            progress.console.print(printable(f"kimicount: {text}"), markup=False, highlight=False)

        yield _Activity(hub(status, note), on_file)


def load_model(
    model: str | None,
    config: Path | None,
    repo: str | None,
    revision: str | None,
    token: str | None,
    timeout: str | None,
    *,
    live: bool,
    command: str,
) -> ModelSpec:
    """The spec the model options name (a positional ORG/NAME or --repo, --config, or the bundled
    Kimi K2), with the progress line while a Hub config is fetched (`live`: a person is watching).
    A model whose family `command` does not serve yet is refused in one line (exit 2)."""
    from kimicount.families import require_command
    from kimicount.source import load_spec

    repo = repo_id(model, repo)
    with progress(live, repo, token, timeout) as activity:
        spec = load_spec(config, repo, revision, activity.hub)
    require_command(spec, command)
    return spec
