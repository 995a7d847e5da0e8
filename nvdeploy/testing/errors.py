"""The one error type of the SSH test harness."""


class HarnessError(RuntimeError):
    """The SSH test harness could not be set up or torn down."""
