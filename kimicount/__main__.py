"""`python -m kimicount` runs the CLI."""

from kimicount.cli import main

if __name__ == "__main__":  # guarded so that pytest's doctest collection can import this module
    main()
