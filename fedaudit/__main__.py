"""`python -m fedaudit` runs the CLI."""

from fedaudit.cli.entry import main

if __name__ == "__main__":
    main()
