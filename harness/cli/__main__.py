"""`python -m harness.cli`: the `evalaware` command line."""

from harness.cli.main import main

if __name__ == "__main__":
    main()
