"""What every command shares to say it cannot run as asked: the exit codes and
`UsageError` (exit 2), and the check of files named by options.

Imports nothing of `jobgate.cli`, so each command module imports it at its top.
"""

from __future__ import annotations

import os

from jobgate import sources

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    """A command that cannot run as asked; exit code 2."""


def named_files(*paths: str | None) -> None:
    """Refuses a file named by an option (configuration, package) that does not exist,
    or is a FIFO, socket or device: reading it would block, or never end. Documents
    are refused by `sources` as they are read."""
    for path in paths:
        if path:
            if not os.path.lexists(path):
                raise UsageError(f"{path}: no such file")
            try:
                sources.ensure_regular(path)
            except sources.NotRegular as e:
                raise UsageError(str(e)) from None
