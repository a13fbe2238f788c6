"""`python -m fedaudit` runs the CLI."""

from fedaudit.cli.app import main

if __name__ == "__main__":
    main()
