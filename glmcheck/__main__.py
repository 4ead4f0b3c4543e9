"""`python -m glmcheck` entry point."""

from glmcheck.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
