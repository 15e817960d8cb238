"""Exceptions that the command-line tools turn into one-line messages (exit 2)."""


class XmlkitError(Exception):
    """A problem with the user's input or options, explained in one line.

    The library names its parameters as the Python API spells them; `param`
    (if given) is the parameter the message is about, written in it as
    `name` or `name=value`: the command-line tools replace that with the
    option's spelling (xmlkit.cli.common.spell_flags)."""

    def __init__(self, *args, param=None):
        self.param = param
        super().__init__(*args)


class InputFormatError(XmlkitError, ValueError):
    """A data file does not follow its format; the message names file and line."""

    def __init__(self, path, line, message, param=None):
        self.path = str(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}", param=param)


class InvalidParameterError(XmlkitError, ValueError):
    """A model parameter is out of its range; `param` names it (the
    command-line tools translate it into their option's spelling)."""

    def __init__(self, param, message):
        super().__init__(message, param=param)


class XmlkitWarning(UserWarning):
    """Something the user should know about a result (the commands print it as
    one line on stderr)."""
