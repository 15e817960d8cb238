"""Exceptions that the command-line tools turn into one-line messages (exit 2)."""


class XmlkitError(Exception):
    """A problem with the user's input or options, explained in one line."""


class InputFormatError(XmlkitError, ValueError):
    """A data file does not follow its format; the message names file and line."""

    def __init__(self, path, line, message):
        self.path = str(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")
