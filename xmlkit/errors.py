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


class InvalidParameterError(XmlkitError, ValueError):
    """A model parameter is out of its range; `param` names it (the
    command-line tools translate it into their option's spelling)."""

    def __init__(self, param, message):
        self.param = param
        super().__init__(message)


class XmlkitWarning(UserWarning):
    """Something the user should know about a result (the commands print it as
    one line on stderr)."""
