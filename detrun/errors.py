"""The error types the CLI maps to exit codes."""

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_INFRA = 2


class DetrunError(Exception):
    """A usage or infrastructure error: one line for the user, exit code 2."""
