"""The ``redelay`` command: a module per command group, output formatting in one place."""

from actors.cli.app import main

__all__ = ["main"]
