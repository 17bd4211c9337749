"""The ``redelay`` command: a module per command group, output formatting in one place.

``main`` is imported from ``actors.cli.app`` on first use, so that importing one of the
command's modules (the dashboard imports ``actors.cli.output``) does not build the whole command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.cli.app import main

__all__ = ["main"]

if not TYPE_CHECKING:  # type checkers see the import above

    def __getattr__(name: str) -> Any:
        if name == "main":
            from actors.cli.app import main

            return main
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
