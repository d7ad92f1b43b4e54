"""The one exception type users see: a single line naming the problem and the fix."""


class BenchError(Exception):
    """A user-facing error. The CLI prints its message alone, without a traceback."""
