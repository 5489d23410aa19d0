"""Errors that reach the user as one line and exit code 2.

Everything the user can fix (a config key, a file, a cfg line) raises ``UsageError``
with a message that names the file, key or line and says what to do. The CLI prints
the message without a traceback; nothing below the CLI prints or exits.
"""


class UsageError(Exception):
    """A problem in the user's input: printed as one line, exit code 2."""
