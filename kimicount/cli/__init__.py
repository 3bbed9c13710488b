"""The command line: parse options, call the library, render with rich or print --json. Nothing else.

One module per command (params, verify, kv_cache, measure, flops, plan), each the same shape, so that a
new one slots in the same way:
- its options are the shared annotated types of `common`: the model (a positional ORG/NAME, --repo,
  --config, --revision), and counts, sizes and dtypes as text that kimicount.options reads the same
  everywhere;
- its body calls the library, then prints --json or hands the result to its view (render*.py);
- an option the chosen view does not use is named on stderr (`common.ignored`), never silently dropped.
Library modules are imported inside the commands, so that --help, --version and errors import neither
rich nor the anatomy (a test checks this with -X importtime). How a run ends (exit codes, one-line
errors, output in any encoding) is `exits`; the typer app and its root options are `app`.
"""

from kimicount.cli import flops, kv_cache, measure, params, plan, verify  # noqa: F401 (each registers its command)
from kimicount.cli.app import app

__all__ = ["app"]
