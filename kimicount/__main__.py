"""`python -m kimicount` and the `kimicount` command: run the CLI.

The entry point imports the CLI inside a guard: start-up imports (typer, rich) take a good part of a
run, and Ctrl-C during them must end the run the way it does anywhere else (one line, exit 130), not
with a traceback.
"""

import sys


def main() -> None:
    """Console-script entry point."""
    try:
        from kimicount.cli import load

        load(sys.argv[1:])()
    except KeyboardInterrupt:  # before or after the CLI's own handler (which prints the same line)
        try:
            sys.stderr.write("kimicount: interrupted\n")
        except (AttributeError, OSError):  # stderr closed: None (`2>&-`), or a pipe without its reader
            pass
        sys.exit(130)


if __name__ == "__main__":  # guarded so that pytest's doctest collection can import this module
    main()
