"""Errors that reach the user as one line and exit status 2."""


class UsageError(Exception):
    """Bad input from the user (scenario file, --set value, run folder).

    The message is one line: what is wrong, where, and what is allowed.
    The CLI prints it and exits with status 2, never with a traceback.
    """

    exit_status = 2
