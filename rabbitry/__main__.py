"""`python -m rabbitry ...`: the same as the `rabbitry` command."""

from rabbitry.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
