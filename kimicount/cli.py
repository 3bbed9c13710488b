"""The command line: parse options, call the library, render with rich or print --json. Nothing else.

Every command has the same shape, so that a new one slots in the same way:
- its options are the shared annotated types below: the model (a positional ORG/NAME, --repo, --config,
  --revision), and counts, sizes and dtypes as text that kimicount.options reads the same everywhere;
- its body calls the library, then prints --json or hands the result to its view (render*.py);
- an option the chosen view does not use is named on stderr (`_ignored`), never silently dropped.
Modules are imported inside the commands, so that --help, --version and errors import neither rich
nor the anatomy (a test checks this with -X importtime).

Exit codes: 0 ok, 1 a check failed (verify found a mismatch, measure a cache off its prediction), 2 bad
input, an unreachable source or unwritable output, 3 an internal error (a bug), 130 interrupted, 141
the reader closed the pipe; every error is one line on stderr (KIMICOUNT_DEBUG=1 shows the traceback
instead).
"""

from __future__ import annotations

import codecs
import gc
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from typer.core import TyperGroup

from kimicount import __version__
from kimicount.errors import KimicountError, UsageError
from kimicount.options import DTYPE_METAVAR, Detail, parse_count, parse_depth, parse_dtype

if TYPE_CHECKING:
    from kimicount.source import HubOptions


class OneLineErrors(TyperGroup):
    """Every error ends the same way, in this one place: one line on stderr. Bad input and unreachable
    sources (KimicountError) and typer's usage errors (a bad option value, an unknown command, which
    typer would draw as a boxed panel) print `kimicount: error: …` and exit 2; so does output that
    cannot be written (a full disk). Ctrl-C prints `kimicount: interrupted` and exits 130; a reader that
    closes the pipe early (`| head`) ends the run quietly with 141, as SIGPIPE does to other commands.
    An unexpected exception prints `kimicount: internal error: …` and exits 3. KIMICOUNT_DEBUG=1 shows
    the traceback."""

    def main(
        self, args: Sequence[str] | None = None, *rest: Any, standalone_mode: bool = True, **kwargs: Any
    ):
        if not standalone_mode:
            return super().main(args, *rest, standalone_mode=False, **kwargs)
        degrade_unencodable_output()
        stdout, sys.stdout = sys.stdout, _Output(sys.stdout)
        try:
            # Not standalone: typer raises its usage errors instead of printing them, and returns the
            # exit code of typer.Exit (or the command's return value, None) instead of exiting.
            code = super().main(args, *rest, standalone_mode=False, **kwargs)
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
                raise
            code = _fail(f"kimicount: error: {' '.join(str(error).splitlines())}")
        except typer.TyperException as error:
            code = 2
            if error.format_message():  # empty when typer has printed the help (no arguments given)
                words = list(sys.argv[1:] if args is None else args)
                command = " ".join(["kimicount", *[w for w in words if w in self.commands][:1]])
                _say(f"kimicount: error: {error.format_message()} (see {command} --help)")
        except (typer.Abort, KeyboardInterrupt):
            code = INTERRUPTED
        except Exception as error:  # a bug: say so in one line, not a traceback
            if os.environ.get("KIMICOUNT_DEBUG"):
                raise
            message = " ".join(str(error).split()) or "no message"
            _say(
                f"kimicount: internal error: {type(error).__name__}: {message} "
                "(please report it; KIMICOUNT_DEBUG=1 shows the traceback)"
            )
            code = 3
        finally:
            sys.stdout = stdout
        if code == INTERRUPTED:  # typer turns a KeyboardInterrupt anywhere in the command into Exit(130)
            _say("kimicount: interrupted")
        _exit(code)


def _fail(line: str) -> int:
    _say(line)
    return 2


def _exit(code: int) -> None:
    """End the run with `code`. When a Hub request abandoned at its deadline or by Ctrl-C is still
    running in its thread, the process ends at once (os._exit, once the output is flushed): the
    interpreter's shutdown would otherwise wait for huggingface_hub's clean-up beside that thread, and
    can crash tearing it down."""
    import threading

    lingering = any(t.name.startswith("kimicount-hub") for t in threading.enumerate())
    if lingering and sys.stdout is sys.__stdout__:  # a real process, not a test runner's capture
        for stream in (sys.stdout, sys.stderr):
            try:
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


def _say(line: str) -> None:
    """One line on stderr; a closed stderr loses it rather than raising a second error."""
    try:
        sys.stderr.write(line + "\n")
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
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and getattr(stream, "errors", "strict") == "strict":
            stream.reconfigure(errors="kimicount-ascii")


EXIT_CODES = (
    "Exit codes: 0 ok; 1 a check failed (verify: a mismatch; measure: a cache off its prediction); "
    "2 bad input, an unreachable source or unwritable output; 3 an internal error (a bug); "
    "130 interrupted; 141 the reader closed the pipe."
)

app = typer.Typer(
    cls=OneLineErrors,
    name="kimicount",
    help="Exact parameter and KV-cache accounting for Kimi K2 and the DeepSeek-V3 family (MLA + MoE).\n\n"
    "With no model named, every command reads the bundled moonshotai/Kimi-K2-Instruct config.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # click's plain help: --help imports no rich, wraps to the terminal, and shows no <bool> metavars
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},  # commands inherit it
)


def choices(enum: type[Enum]) -> str:
    """How --help shows an option's choices: [a|b|c], the style of every choice option."""
    return f"[{'|'.join(member.value for member in enum)}]"


ModelArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="[ORG/NAME]",
        help="A Hub repo id, as hf download takes it (the same as --repo).",
        show_default=False,
    ),
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
    float | None,
    typer.Option(
        "--timeout",
        envvar="KIMICOUNT_TIMEOUT",
        metavar="SECONDS",
        help="Give up on the Hub after this long, every request and retry together (default 300).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the stable JSON report instead of tables.")]

#: How --help describes the forms a count takes (--tokens, --batch, ...).
COUNTS = "128k = 128,000, 128Ki = 131,072, 1e6"


def _repo(model: str | None, repo: str | None) -> str | None:
    """The repo named positionally (as `hf download ORG/NAME`) or with --repo."""
    if model is not None and repo is not None and model != repo:
        raise UsageError(f"name the repo once: {model} or --repo {repo}, not both")
    return model if model is not None else repo


def _warn(message: str) -> None:
    typer.echo(f"kimicount: warning: {message}", err=True)


def _ignored(ctx: typer.Context, why: str, *names: str) -> None:
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
        _warn(f"{options} {'has' if len(given) == 1 else 'have'} no effect {why}")


def print_json(report: dict[str, Any]) -> None:
    """The report on stdout; where stdout cannot encode every character (PYTHONIOENCODING=ascii), the
    others are written as JSON's own escapes (\\u00d7), which read back exactly."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    sys.stdout.write(json.dumps(report, indent=2, ensure_ascii=not encoding.startswith("utf")) + "\n")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kimicount {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Exact parameter and KV-cache accounting for Kimi K2 and the DeepSeek-V3 family."""
    if not os.environ.get("KIMICOUNT_DEBUG"):
        # huggingface_hub logs each retry as a warning; kimicount says each retry itself, and the error
        # line says what failed. Read when huggingface_hub is first imported, so an explicit setting of
        # the user's wins.
        os.environ.setdefault("HF_HUB_VERBOSITY", "error")
    # One progress display: kimicount's own line says what is fetched from where (_activity).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


class Breakdown(str, Enum):
    component = "component"
    layer = "layer"
    memory = "memory"


@app.command(epilog=EXIT_CODES, short_help="Parameters per component and layer, in total and activated.")
def params(
    ctx: typer.Context,
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    by: Annotated[
        Breakdown,
        typer.Option(
            "--by",
            metavar=choices(Breakdown),
            help="component: the component tree; layer: one row per layer (identical layers share a row); "
            "memory: weight bytes per component, as stored (FP8, INT4) and in BF16.",
        ),
    ] = Breakdown.component,
    depth: Annotated[
        str,
        typer.Option(
            "--depth",
            metavar="N",
            help="Tree rows down to depth N: 0 = the model alone, all = every component.",
        ),
    ] = "3",
    detail: Annotated[
        Detail | None,
        typer.Option(
            "--detail",
            metavar=choices(Detail),
            help="Last column: calculation (numbers; the default, left out when the terminal is too narrow "
            "for it), formula (config keys) or tensors (checkpoint names).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Parameters per component, per layer, in total and activated per token.

    Counts come from config.json alone. FP8 scales and rotary buffers are not parameters; the
    multi-token-prediction module (DeepSeek-V3) is reported apart, outside the total.
    """
    max_depth = parse_depth(depth)  # option text is read first: a typo costs no imports
    from kimicount.anatomy import build_anatomy
    from kimicount.source import load_spec

    with _activity(not as_json, _repo(model, repo), token, timeout) as activity:
        spec = load_spec(config, _repo(model, repo), revision, activity.hub)
    anatomy = build_anatomy(spec)
    if by is Breakdown.memory:
        from kimicount.storage import require_modelled

        require_modelled(anatomy.spec)
    if as_json:
        from kimicount.reports import params_json

        shaped = ("depth", "detail") if by is Breakdown.memory else ("by", "depth", "detail")
        _ignored(ctx, "with --json (it holds the whole tree and every layer)", *shaped)
        print_json(params_json(anatomy))
        return
    from kimicount.render import make_console
    from kimicount.render_params import render_layers, render_memory, render_params

    console = make_console()
    if by is Breakdown.layer:
        _ignored(ctx, "with --by layer (one row per layer)", "depth", "detail")
        render_layers(console, anatomy)
    elif by is Breakdown.memory:
        _ignored(ctx, "with --by memory (it shows bytes, not calculations)", "detail")
        render_memory(console, anatomy, max_depth=max_depth)
    else:
        render_params(console, anatomy, max_depth=max_depth, detail=detail)


@app.command(epilog=EXIT_CODES, short_help="Check a checkpoint against the anatomy, from its headers alone.")
def verify(
    ctx: typer.Context,
    model: ModelArgument = None,
    path: Annotated[
        Path | None,
        typer.Option(
            "--path",
            metavar="DIR",
            help="A local checkpoint folder (model.safetensors.index.json, model.safetensors or shards).",
            show_default=False,
        ),
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(
            "--repo",
            metavar="ORG/NAME",
            help="A Hub repo id: its config.json and safetensors headers, never the tensor data.",
            show_default=False,
        ),
    ] = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="PATH",
            help="config.json to check against (default: the checkpoint's own).",
            show_default=False,
        ),
    ] = None,
    depth: Annotated[
        str, typer.Option("--depth", metavar="N", help="Component rows down to depth N (all: every one).")
    ] = "3",
    as_json: JsonOption = False,
) -> None:
    """Check every tensor of a checkpoint against the computed anatomy, reading only the headers.

    Names, shapes and dtypes are compared; FP8 block scales are checked against their weights and,
    like rotary buffers, counted apart. Exit 0 when everything matches, 1 on any mismatch.
    """
    max_depth = parse_depth(depth)
    from kimicount.anatomy import build_anatomy
    from kimicount.source import load_checkpoint
    from kimicount.verify import verify as verify_checkpoint

    repo = _repo(model, repo)
    with _activity(not as_json, repo, token, timeout, local_files=True) as activity, _gc_paused():
        spec, checkpoint = load_checkpoint(path, repo, revision, config, activity.on_file, activity.hub)
        report = verify_checkpoint(build_anatomy(spec), checkpoint)
    if as_json:
        from kimicount.reports import verify_json

        _ignored(ctx, "with --json (it holds every component)", "depth")
        print_json(verify_json(report))
    else:
        from kimicount.render import make_console
        from kimicount.render_verify import render_verify

        render_verify(make_console(), report, max_depth=max_depth)
    raise typer.Exit(0 if report.ok else 1)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing 139,644 header entries allocates hundreds of thousands of small objects and none of them
    form cycles; the cyclic collector would otherwise rescan them again and again (a third of the time).
    What is still alive afterwards is frozen, so that the collector never scans it again either."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class _Activity:
    hub: HubOptions | None  # None: no Hub named
    on_file: Callable[[str], None] | None  # called per local file read


@contextmanager
def _activity(
    live: bool, repo: str | None, token: str | None, timeout: float | None, local_files: bool = False
) -> Iterator[_Activity]:
    """What a command is reading, said on stderr. On a terminal (and without --json), while a Hub repo
    or local checkpoint files are read: one transient line, what is being fetched from where or how many
    files have been read, with each Hub retry printed above it. Elsewhere: only the retries, one line
    each."""
    from kimicount.source import DEFAULT_TIMEOUT, HubOptions

    def hub(status: Callable[[str], None], note: Callable[[str], None]) -> HubOptions | None:
        if repo is None and token is None:
            return None
        return HubOptions(token, DEFAULT_TIMEOUT if timeout is None else timeout, status, note)

    def note_line(text: str) -> None:
        _say(f"kimicount: {text}")

    if not (live and (repo is not None or local_files)):
        yield _Activity(hub(lambda _text: None, note_line), None)
        return
    from kimicount.render import make_console

    console = make_console(stderr=True)
    if not console.is_terminal:
        yield _Activity(hub(lambda _text: None, note_line), None)
        return
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
            progress.update(task, description=text[:1].upper() + text[1:])

        def note(text: str) -> None:
            progress.console.print(f"kimicount: {text}", markup=False, highlight=False)

        yield _Activity(hub(status, note), on_file)


@app.command(
    "kv-cache",
    epilog=EXIT_CODES,
    short_help="KV-cache bytes per layout, for any context, batch and GPU split.",
)
def kv_cache(
    ctx: typer.Context,
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    tokens: Annotated[
        str | None,
        typer.Option(
            "--tokens",
            metavar="N",
            help=f"Tokens per sequence (context length; {COUNTS}). Default: the model's max_position_embeddings.",
            show_default=False,
        ),
    ] = None,
    batch: Annotated[str, typer.Option("--batch", metavar="N", help="Sequences cached at once.")] = "1",
    layout: Annotated[
        list[str] | None,
        typer.Option(
            "--layout",
            metavar="[naive|flash|latent|flashmla-fp8]",
            help="Show this layout only; repeat for several. Default: naive, flash and latent. naive: every "
            "head's key and value; flash: values padded to the key width; latent: MLA's compressed latent "
            "+ rotary key; flashmla-fp8: FlashMLA's fp8 latent (656 B per token per layer for Kimi K2).",
            show_default=False,
        ),
    ] = None,
    dtype: DtypeOption = None,
    block_size: Annotated[
        str,
        typer.Option(
            "--block-size",
            metavar="N",
            help="Page size in tokens: engines allocate whole pages, so each sequence is rounded up "
            "(vLLM and SGLang use 16 to 64; FlashMLA 64). 1: no rounding.",
        ),
    ] = "1",
    tp: Annotated[
        str,
        typer.Option(
            "--tp",
            metavar="N",
            help="Tensor-parallel GPUs: naive and flash split their heads across them (N must divide "
            "num_attention_heads); the latent is replicated on every GPU.",
        ),
    ] = "1",
    include_mtp: Annotated[
        bool,
        typer.Option(
            "--include-mtp", help="Count the multi-token-prediction layers' caches too (DeepSeek-V3)."
        ),
    ] = False,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            metavar="SIZE",
            help="Memory for the cache on each GPU, e.g. 80GiB, 80GB, 512MiB or bytes: prints the most "
            "tokens, and the most sequences of --tokens, that fit in each layout.",
            show_default=False,
        ),
    ] = None,
    chart: Annotated[
        bool, typer.Option("--chart/--no-chart", help="Chart the cache size against context length.")
    ] = True,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="FILE.svg",
            help="Also write that chart as an SVG file (log-log: bytes against context length; per-GPU "
            "lines with --tp, the budget with --budget).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """KV-cache bytes per token, per layer and in total, in each cache layout an engine may use.

    Multi-head latent attention caches one small latent per token for all heads; engines that expand
    it into per-head keys and values pay for every head (35.6× the latent for Kimi K2).
    """
    from kimicount.kvcache import context_sweep, kv_cache_report, parse_layout
    from kimicount.options import parse_size
    from kimicount.source import load_spec

    with _activity(not as_json, _repo(model, repo), token, timeout) as activity:
        spec = load_spec(config, _repo(model, repo), revision, activity.hub)
    report = kv_cache_report(
        spec,
        tokens=None if tokens is None else parse_count(tokens, "--tokens"),
        batch=parse_count(batch, "--batch"),
        dtype=None if dtype is None else parse_dtype(dtype),
        layouts=[parse_layout(name) for name in layout or ()],
        block_size=parse_count(block_size, "--block-size"),
        tp=parse_count(tp, "--tp"),
        include_mtp=include_mtp,
        budget=None if budget is None else parse_size(budget),
    )
    if plot is not None:
        from kimicount.chart import write_svg

        write_svg(plot, report, context_sweep(report))
    longest = report.spec.max_position_embeddings
    if report.workload.tokens > longest:
        _warn(
            f"--tokens {report.workload.tokens:,} is past the model's context, {longest:,} tokens "
            "(max_position_embeddings); the sizes are exact all the same"
        )
    if as_json:
        from kimicount.reports import kv_cache_json

        _ignored(ctx, "with --json", "chart")
        print_json(kv_cache_json(report))
        return
    from kimicount.render import make_console, show
    from kimicount.render_kv_cache import render_cache_chart, render_kv_cache

    console = make_console()
    render_kv_cache(console, report)
    if chart:
        show(console)
        render_cache_chart(console, context_sweep(report))


class MeasureDevice(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


@app.command(
    "measure", epilog=EXIT_CODES, short_help="Build each KV-cache layout in torch and measure its bytes."
)
def measure_command(
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    device: Annotated[
        MeasureDevice,
        typer.Option(
            "--device",
            metavar=choices(MeasureDevice),
            help="auto: the CUDA GPU when torch sees one, else the CPU; cuda: fail without one.",
        ),
    ] = MeasureDevice.auto,
    tokens: Annotated[
        str, typer.Option("--tokens", metavar="N", help=f"Tokens prefilled into each cache (T; {COUNTS}).")
    ] = "4096",
    batch: Annotated[str, typer.Option("--batch", metavar="N", help="Sequences in the batch (B).")] = "1",
    layers: Annotated[
        str,
        typer.Option(
            "--layers", metavar="N", help="Layers whose caches are filled (caches grow linearly with it)."
        ),
    ] = "1",
    dtype: DtypeOption = None,
    decode_steps: Annotated[
        str,
        typer.Option("--decode-steps", metavar="N", help="Decode steps timed after a warm-up one (median)."),
    ] = "5",
    as_json: JsonOption = False,
) -> None:
    """Build each KV-cache layout for real in torch and measure the bytes it holds.

    Runs one MLA attention layer at the model's true dimensions with seeded random weights, fills the
    naive, flash, latent and FlashMLA-fp8 caches by a real prefill, compares their bytes with the
    kv-cache prediction, and decodes one more token over each to check that they hold the same thing.
    Exits 1 when a cache holds other bytes than predicted or decodes differently from the naive cache.

    Needs torch, an optional extra: from a kimicount checkout, pip install "torch==2.13.0+cpu" -e
    ".[measure]" --extra-index-url https://download.pytorch.org/whl/cpu (with a CUDA GPU: pip install
    torch==2.13.0 -e ".[measure]").
    """
    from kimicount.measure import measure
    from kimicount.source import load_spec

    with _activity(not as_json, _repo(model, repo), token, timeout) as activity:
        spec = load_spec(config, _repo(model, repo), revision, activity.hub)
    result = measure(
        spec,
        device=device.value,
        tokens=parse_count(tokens, "--tokens"),
        batch=parse_count(batch, "--batch"),
        layers=parse_count(layers, "--layers"),
        dtype=None if dtype is None else parse_dtype(dtype),
        decode_steps=parse_count(decode_steps, "--decode-steps"),
    )
    if as_json:
        from kimicount.reports import measure_json

        print_json(measure_json(result))
    else:
        from kimicount.render import make_console
        from kimicount.render_measure import render_measure

        render_measure(make_console(), result)
    if not result.ok:
        raise typer.Exit(1)


@app.command(
    "flops", epilog=EXIT_CODES, short_help="FLOPs per token of every component, and of MLA run three ways."
)
def flops_command(
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    tokens: Annotated[
        str, typer.Option("--tokens", metavar="N", help=f"Prompt length T of the prefill ({COUNTS}).")
    ] = "4096",
    context: Annotated[
        str, typer.Option("--context", metavar="N", help="Positions L a decode step attends to.")
    ] = "4096",
    depth: Annotated[
        str,
        typer.Option(
            "--depth",
            metavar="N",
            help="Tree rows down to depth N: 0 = the model alone, all = every component.",
        ),
    ] = "all",
    as_json: JsonOption = False,
) -> None:
    """FLOPs per token of every component, and of the attention in each way engines run MLA.

    A matmul of in × out is 2 × in × out FLOPs per token. The attention is shown for a naive cache,
    the latent re-expanded through kv_b_proj every step, and the absorbed latent, in prefill and decode.
    """
    max_depth = parse_depth(depth)
    prompt, positions = parse_count(tokens, "--tokens"), parse_count(context, "--context")
    from kimicount.anatomy import build_anatomy
    from kimicount.flow import flops_report
    from kimicount.source import load_spec

    with _activity(not as_json, _repo(model, repo), token, timeout) as activity:
        spec = load_spec(config, _repo(model, repo), revision, activity.hub)
    anatomy = build_anatomy(spec)
    report = flops_report(anatomy.spec, anatomy.model, tokens=prompt, context=positions)
    if as_json:
        from kimicount.reports_plan import flops_json

        print_json(flops_json(report))
        return
    from kimicount.render import make_console
    from kimicount.render_flow import render_flops

    render_flops(make_console(), report, max_depth=max_depth)


def _count_or_none(text: str | None, option: str) -> int | None:
    return None if text is None else parse_count(text, option)


@app.command(
    "plan", epilog=EXIT_CODES, short_help="Memory per GPU for a deployment, and what KV cache is left."
)
def plan_command(
    gpus: Annotated[
        str,
        typer.Option(
            "--gpus",
            metavar="NxTYPE",
            help="How many GPUs of which type: 8xH200, 8×H200, 16xH100 (types: A100-80GB, H100, H800, H20, "
            "H200, B200, GB200, MI300X, MI325X), or a count alone with --gpu-memory.",
            show_default=False,
        ),
    ],
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    gpu_memory: Annotated[
        str | None,
        typer.Option(
            "--gpu-memory",
            metavar="SIZE",
            help="Memory per GPU (e.g. 141GiB), instead of the table's.",
            show_default=False,
        ),
    ] = None,
    hbm_bandwidth: Annotated[
        str | None,
        typer.Option(
            "--hbm-bandwidth",
            metavar="RATE",
            help="HBM bandwidth per GPU (e.g. 4.8TB/s).",
            show_default=False,
        ),
    ] = None,
    peak_bf16: Annotated[
        str | None,
        typer.Option(
            "--peak-bf16",
            metavar="FLOPS",
            help="Dense BF16 peak per GPU (e.g. 989.5TFLOPS).",
            show_default=False,
        ),
    ] = None,
    peak_fp8: Annotated[
        str | None,
        typer.Option(
            "--peak-fp8",
            metavar="FLOPS",
            help="Dense FP8 peak per GPU (e.g. 1979TFLOPS).",
            show_default=False,
        ),
    ] = None,
    tp: Annotated[
        str | None,
        typer.Option(
            "--tp",
            metavar="N",
            help="Tensor-parallel GPUs per attention group. Default: what --pp and --dp leave.",
            show_default=False,
        ),
    ] = None,
    pp: Annotated[str, typer.Option("--pp", metavar="N", help="Pipeline stages.")] = "1",
    dp: Annotated[
        str,
        typer.Option(
            "--dp", metavar="N", help="Data-parallel attention groups; each keeps its own sequences."
        ),
    ] = "1",
    ep: Annotated[
        str | None,
        typer.Option(
            "--ep",
            metavar="N",
            help="Expert parallelism; engines size it TP × DP, the only value accepted.",
            show_default=False,
        ),
    ] = None,
    dcp: Annotated[
        str,
        typer.Option(
            "--dcp",
            metavar="N",
            help="Decode-context parallelism: the latent split by token over DCP of the TP ranks.",
        ),
    ] = "1",
    mtp: Annotated[
        bool, typer.Option("--mtp", help="Load the multi-token-prediction layer (speculative decoding).")
    ] = False,
    text_only: Annotated[
        bool,
        typer.Option(
            "--text-only", help="Leave out the vision tower (a text-only server; Kimi-K2-Thinking has none)."
        ),
    ] = False,
    gpu_memory_utilization: Annotated[
        float,
        typer.Option(
            "--gpu-memory-utilization", metavar="FRACTION", help="The share of memory the engine may use."
        ),
    ] = 0.9,
    reserve: Annotated[
        str | None,
        typer.Option(
            "--reserve",
            metavar="SIZE",
            help="What the engine keeps back for activations, CUDA graphs and buffers. Default: an estimate.",
            show_default=False,
        ),
    ] = None,
    max_batched_tokens: Annotated[
        str | None,
        typer.Option(
            "--max-batched-tokens",
            metavar="N",
            help="Tokens per forward pass, for the reserve estimate. Default: vLLM's (8,192 on large GPUs).",
            show_default=False,
        ),
    ] = None,
    max_num_seqs: Annotated[
        str | None,
        typer.Option(
            "--max-num-seqs",
            metavar="N",
            help="Sequences per step, for the reserve estimate. Default: vLLM's (1,024 on large GPUs).",
            show_default=False,
        ),
    ] = None,
    kv_memory: Annotated[
        str | None,
        typer.Option(
            "--kv-memory",
            metavar="SIZE",
            help="The KV pool per GPU an engine printed (e.g. 46.80GiB): skips weights and reserve.",
            show_default=False,
        ),
    ] = None,
    kv_dtype: Annotated[
        str | None,
        typer.Option(
            "--kv-dtype",
            metavar=DTYPE_METAVAR,
            help="KV cache dtype. Default: the model's. fp8 on DeepSeek-V3.2 is FlashMLA's 656-byte record.",
            show_default=False,
        ),
    ] = None,
    kv_layout: Annotated[
        str | None,
        typer.Option(
            "--kv-layout",
            metavar="[latent|flashmla-fp8|naive|flash]",
            help="KV cache layout. Default: the engines' (the latent).",
            show_default=False,
        ),
    ] = None,
    block_size: Annotated[
        str, typer.Option("--block-size", metavar="N", help="KV page size in tokens (FlashMLA's 64).")
    ] = "64",
    max_model_len: Annotated[
        str | None,
        typer.Option(
            "--max-model-len",
            metavar="N",
            help=f"Longest sequence ({COUNTS}). Default: the config's max_position_embeddings.",
            show_default=False,
        ),
    ] = None,
    min_gpus: Annotated[
        bool, typer.Option("--min-gpus", help="Also find the fewest GPUs of this type that hold it.")
    ] = False,
    batch: Annotated[
        str | None,
        typer.Option(
            "--batch",
            metavar="N",
            help="Sequences per replica in a decode step: adds the speed floor (default 1 with --context).",
            show_default=False,
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(
            "--context",
            metavar="N",
            help="Positions a decode step attends to, and the prompt of the prefill floor (default 4,096 "
            "with --batch).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Memory per GPU for a deployment: weights by component, the reserve, and the KV cache that is left.

    Shards the model as vLLM and SGLang do (TP, PP, DP attention, EP, DCP), at the checkpoint's stored
    bytes, and says how many tokens of context fit. The reserve is an estimate, labelled so.
    """
    from fractions import Fraction

    from kimicount.hardware import (
        custom_accelerator,
        parse_bandwidth,
        parse_flops,
        parse_gpus,
        with_overrides,
    )
    from kimicount.kvcache import parse_layout
    from kimicount.options import parse_size

    count, gpu = parse_gpus(gpus)
    memory = None if gpu_memory is None else parse_size(gpu_memory, "--gpu-memory")
    if gpu is None:
        if memory is None:
            raise UsageError(
                f"--gpus {gpus}: name the GPU type (e.g. {count}xH200) or give --gpu-memory SIZE"
            )
        gpu = custom_accelerator(memory)
    gpu = with_overrides(
        gpu,
        memory_bytes=memory,
        hbm_bandwidth=None if hbm_bandwidth is None else parse_bandwidth(hbm_bandwidth),
        bf16_flops=None if peak_bf16 is None else parse_flops(peak_bf16, "--peak-bf16"),
        fp8_flops=None if peak_fp8 is None else parse_flops(peak_fp8, "--peak-fp8"),
    )
    layout = {
        "tp": _count_or_none(tp, "--tp"),
        "pp": parse_count(pp, "--pp"),
        "dp": parse_count(dp, "--dp"),
        "ep": _count_or_none(ep, "--ep"),
        "dcp": parse_count(dcp, "--dcp"),
        "utilization": Fraction(str(gpu_memory_utilization)),
        "reserve": None if reserve is None else parse_size(reserve, "--reserve"),
        "max_batched_tokens": _count_or_none(max_batched_tokens, "--max-batched-tokens"),
        "max_num_seqs": _count_or_none(max_num_seqs, "--max-num-seqs"),
        "kv_memory": None if kv_memory is None else parse_size(kv_memory, "--kv-memory"),
        "kv_dtype": None if kv_dtype is None else parse_dtype(kv_dtype, "--kv-dtype"),
        "kv_layout": None if kv_layout is None else parse_layout(kv_layout, "--kv-layout"),
        "block_size": parse_count(block_size, "--block-size"),
        "max_model_len": _count_or_none(max_model_len, "--max-model-len"),
    }
    step = (_count_or_none(batch, "--batch"), _count_or_none(context, "--context"))
    from kimicount.anatomy import build_anatomy
    from kimicount.plan import plan
    from kimicount.source import load_spec
    from kimicount.storage import require_modelled

    with _activity(not as_json, _repo(model, repo), token, timeout) as activity:
        spec = load_spec(config, _repo(model, repo), revision, activity.hub)
    anatomy = build_anatomy(spec)
    require_modelled(anatomy.spec)
    report = plan(anatomy, gpu, count, **layout, mtp=mtp, vision=not text_only, min_gpus=min_gpus)
    speed = None
    if step != (None, None):
        from kimicount.speed import step_floor, sweep

        sequences = 1 if step[0] is None else step[0]
        positions = 4096 if step[1] is None else step[1]
        speed = (
            step_floor(report, batch=sequences, context=positions),
            sweep(report, positions, sequences),
            step_floor(report, batch=1, context=positions, prefill=True),
        )
    if as_json:
        from kimicount.reports_plan import plan_json, speed_json

        print_json({**plan_json(report), **({} if speed is None else speed_json(report, *speed))})
        return
    from kimicount.render import make_console, show
    from kimicount.render_plan import render_plan, render_speed

    console = make_console()
    render_plan(console, report)
    if speed is not None:
        show(console)
        render_speed(console, report, *speed)


def main() -> None:
    """The CLI (the console script and `python -m kimicount` run it through kimicount.__main__)."""
    app()
