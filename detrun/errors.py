"""The error types the CLI maps to exit codes."""

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_INFRA = 2


class DetrunError(Exception):
    """A usage or infrastructure error: one line for the user, exit code 2."""

AUTH_HINT = ("set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (the cluster's token, "
             "see `ray get-auth-token` on the head) in this shell")
