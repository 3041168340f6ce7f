"""`python -m evalaware`: the `evalaware` command line."""

from evalaware.main import main

if __name__ == "__main__":
    main()
