"""`python -m glmcheck` entry point."""

from glmcheck.cli import console_main

if __name__ == "__main__":
    raise SystemExit(console_main())
