"""The CLI's two kinds of failure, each printed as one line without a traceback."""

EXIT_FAILED = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad command-line input, or a flag whose value cannot work here: exit 2."""


class CommandFailed(Exception):
    """The command ran but its goal was not reached: exit 1."""
