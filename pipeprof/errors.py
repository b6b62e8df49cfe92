"""Errors that reach the user as one line and exit status 2; the commands' other exit statuses."""

EXIT_FAILED = 1  # training (or every point of a sweep) failed; what was measured is saved
EXIT_INTERRUPTED = 130  # Ctrl-C; what was measured is saved


class UsageError(Exception):
    """Bad input from the user (scenario file, --set value, run folder).

    The message is one line: what is wrong, where, and what is allowed.
    The CLI prints it and exits with status 2, never with a traceback.
    """

    exit_status = 2
