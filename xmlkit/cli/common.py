"""What every xmlkit command shares: error handling, logging, common options."""
import errno
import os
import re
import signal
import sys
import warnings

import click

from xmlkit._version import __version__
from xmlkit.errors import XmlkitError
from xmlkit.cli.launch import no_memory_to_load

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
EXIT_INPUT = 2


#: library parameters fed by an option of another name (parameter -> the
#: option's name in the commands)
OPTION_OF = {"address": "dask_address"}


def spell_flags(message, param, command):
    """`message` with the library's `param` (written `param` or
    `param=value`) spelled as `command`'s option for it: `--flag value`,
    or the on/off flag of a boolean option; unchanged if the command has no
    such option."""
    name = OPTION_OF.get(param, param)
    option = next((p for p in getattr(command, "params", ())
                   if isinstance(p, click.Option) and p.name == name), None)
    if option is None:
        return message
    flag = max(option.opts, key=len)
    if option.is_flag and option.secondary_opts:
        for value, spelled in (("False", max(option.secondary_opts, key=len)), ("True", flag)):
            message = message.replace(f"{param}={value}", spelled)
    message = re.sub(rf"(?<![\w-]){re.escape(param)}=", flag + " ", message, count=1)
    return re.sub(rf"(?<![\w-]){re.escape(param)}(?![\w=])", flag, message, count=1)


def given_algorithms(args):
    """The names a command line gives --algorithm, in order (click takes the
    last; named_algorithm the first, to build the option table, so that a
    second one is refused); not checked against the families."""
    names = []
    for i, a in enumerate(args):
        if a == "--algorithm" and i + 1 < len(args):
            names.append(args[i + 1])
        elif a.startswith("--algorithm="):
            names.append(a.split("=", 1)[1])
    return names


def named_algorithm(args):
    """The family named by the first --algorithm on a command line, or None
    (none, or a name that is not a family: click then reports it)."""
    from xmlkit.models import REGISTRY
    names = given_algorithms(args)
    return names[0] if names and names[0] in REGISTRY else None


def fail(message):
    """Stop with a one-line error (exit 2)."""
    raise XmlkitError(message)


class Terminated(BaseException):
    """SIGTERM, raised in the main thread like KeyboardInterrupt for Ctrl-C."""


def _on_sigterm(signum, frame):
    raise Terminated()


def _leave(code):
    """Exit at once with `code` (after a failure or an interrupt): worker
    threads still inside a kernel are not waited for (the temporary files
    they write are removed by the next run into the same folder)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


#: the exit code of a command whose standard output its reader closed
EXIT_PIPE = 141


class _PipeClosed(BaseException):
    """Standard output's reader closed it (a BrokenPipeError, carried past
    click, which would turn it into exit 1)."""


def _closed_pipe():
    """Leave quietly with EXIT_PIPE: the reader of standard output closed
    it (what would be written is no longer wanted); what is still buffered
    goes nowhere."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    os._exit(EXIT_PIPE)


#: click's "no arguments: here is the help" (click 8.2 and newer; before it,
#: click printed the help itself; an empty tuple matches nothing)
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def run(command, prog):
    """Run a click command; every failure is one line on stderr.

    Exit codes: 0 success; 2 bad input or options, a damaged model, an
    unusable output location, out of memory; 130 interrupted (Ctrl-C), 143
    terminated (SIGTERM), 141 standard output closed by its reader (a pipe
    into `head`: nothing on stderr, as any tool a closed pipe stops); 1 an
    unexpected internal error, with a one-line summary (XMLKIT_DEBUG=1
    shows the traceback).
    """
    signal.signal(signal.SIGTERM, _on_sigterm)
    from xmlkit._ext.file_check import exit_on_map_fault, exit_on_no_memory
    exit_on_map_fault(f"{prog}: error: ")   # (a mapped model file cut short: exit 2)
    exit_on_no_memory(_memory_message(prog, command) + "\n")  # (a kernel refused memory)

    def show_warning(message, category, filename, lineno, file=None, line=None):
        click.echo(f"{prog}: warning: {message}", err=True)
    warnings.showwarning = show_warning
    callback = command.callback

    def guarded(*args, **kwargs):
        # (click would end the command with exit 1 on a closed pipe)
        try:
            return callback(*args, **kwargs)
        except BrokenPipeError:
            raise _PipeClosed() from None
    command.callback = guarded
    try:
        command.main(prog_name=prog, standalone_mode=False)
        sys.stdout.flush()          # (a closed pipe shows here, not at exit)
    except (BrokenPipeError, _PipeClosed):
        _closed_pipe()
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except _NO_ARGS_IS_HELP as exc:
        click.echo(exc.ctx.get_help(), err=True)
        sys.exit(EXIT_INPUT)
    except click.ClickException as exc:
        click.echo(f"{prog}: error: {exc.format_message()} (see {prog} --help)", err=True)
        _leave(EXIT_INPUT)
    except XmlkitError as exc:
        message = str(exc)
        names = exc.param if isinstance(exc.param, tuple) else (exc.param,)
        for name in (n for n in names if n is not None):
            message = spell_flags(message, name, command)
        click.echo(f"{prog}: error: {message}", err=True)
        _leave(EXIT_INPUT)
    except (click.Abort, KeyboardInterrupt):
        click.echo(f"{prog}: interrupted", err=True)
        _leave(130)
    except Terminated:
        click.echo(f"{prog}: terminated", err=True)
        _leave(143)
    except MemoryError:
        _out_of_memory(prog, command)
    except OSError as exc:
        if exc.errno == errno.ENOMEM:                   # (a mapping or a thread refused)
            _out_of_memory(prog, command)
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"{prog}: error: {where}{exc.strerror or exc}", err=True)
        _leave(EXIT_INPUT)
    except Exception as exc:  # noqa: BLE001 - last resort, still one line
        if os.environ.get("XMLKIT_DEBUG"):
            raise
        if no_memory_to_load(exc) or _memory_spent():  # (the system refusing memory)
            _out_of_memory(prog, command)
        click.echo(f"{prog}: internal error: {type(exc).__name__}: {exc} "
                   "(set XMLKIT_DEBUG=1 for a traceback)", err=True)
        _leave(1)
    sys.exit(0)


#: an error raised with less memory than this left to the process is taken
#: for the memory running out (imports and the interpreter fail oddly then)
SPENT_BYTES = 32 << 20


def _memory_spent():
    try:
        from xmlkit._memory import available_bytes
        have = available_bytes()
    except Exception:  # noqa: BLE001 - (an import failing here: no memory left)
        return True
    return have is not None and have < SPENT_BYTES


def _memory_message(prog, command):
    """The one line of a command that ran out of memory."""
    threads = any(isinstance(p, click.Option) and p.name == "threads"
                  for p in getattr(command, "params", ()))
    return (f"{prog}: error: out of memory (the data or model need more memory than this "
            "machine has" + ("; fewer threads -T may help)" if threads else ")"))


def _out_of_memory(prog, command):
    click.echo(_memory_message(prog, command), err=True)
    _leave(EXIT_INPUT)


class Timeline:
    """Marks of a command's phases, for the benchmarks (scripts/
    bench_predict_scaling.py): with XMLKIT_PROFILE=FILE set, mark(name)
    records the time since the process started (Linux: from /proc; else
    since the first mark) and save() writes them to FILE as JSON. Without
    it, nothing is done."""

    def __init__(self):
        import time
        self.path = os.environ.get("XMLKIT_PROFILE")
        self.marks = {}
        self._clock = time.perf_counter
        self._zero = self._clock() - _process_age() if self.path else 0.0

    def mark(self, name):
        if self.path:
            self.marks[name] = round(self._clock() - self._zero, 6)

    def save(self):
        if self.path:
            import json
            with open(self.path, "w") as f:
                json.dump(self.marks, f)


def _process_age():
    """Seconds since this process started (Linux), else 0."""
    try:
        with open("/proc/self/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return max(0.0, up - start / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class Log:
    """Messages for stderr, silenced by --quiet."""

    def __init__(self, quiet):
        self.quiet = quiet

    def __call__(self, message):
        if not self.quiet:
            click.echo(message, err=True)

    def progress(self, total, desc, unit="rows"):
        """A tqdm bar on stderr; shown only on a terminal and when not quiet
        (else a bar that shows nothing, without importing tqdm and its
        memory)."""
        if self.quiet or not sys.stderr.isatty():
            return _HiddenBar(total)
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
                    dynamic_ncols=True, mininterval=0.5)


class _HiddenBar:
    """What a progress bar that is not shown needs: a context manager
    counting with update(n) (n, total as tqdm's)."""

    def __init__(self, total):
        self.total, self.n = total, 0

    def update(self, n=1):
        self.n += n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


quiet_option = click.option("-q", "--quiet", is_flag=True, default=False,
                            help="No progress bars or log messages on stderr.")
index_base_option = click.option(
    "--index-base", type=click.IntRange(0, 1), default=0, show_default=True,
    help="Index base of the feature and label indices in the files read and the score or "
         "label files written (XC files are 0-based): give the same to every command of a "
         "pipeline.")
json_option = click.option("--json", "as_json", is_flag=True, default=False,
                           help="Print the results as JSON instead of a table.")
version_option = click.version_option(__version__, "--version", message="%(prog)s %(version)s")


def read_input(log, path, index_base, layout=None, what="rows"):
    """Read an XC file with a progress bar."""
    from xmlkit.io import read_xc
    with log.progress(None, f"reading {os.path.basename(str(path))}", what) as bar:
        def update(done, total):
            bar.total = total
            bar.update(done - bar.n)
        return read_xc(path, index_base=index_base, layout=layout, progress=update)


# ---- text input (xmlkit.text; the `text` extra) ---------------------------

def text_input_options(when="With --text: "):
    """--text-format and --label-sep: how a document file is read (`when`
    starts their help: the option that makes them apply)."""
    from xmlkit.text import FORMATS
    return [
        click.option("--text-format", type=click.Choice(FORMATS), default=None,
                     help=when + "JSON Lines ({\"id\", \"text\", \"labels\": [...]}) or "
                          "TSV (labels<TAB>text) [default: by suffix, .tsv is TSV, anything "
                          "else JSON Lines; JSON Lines for '-']."),
        click.option("--label-sep", default=",", show_default=True,
                     help=f"{when}TSV: the character between label names."),
    ]


def text_input(command):
    """Decorator: the text_input_options of a command that takes --text."""
    for option in reversed(text_input_options()):
        command = option(command)
    return command


def featurizer_options(when="With --text: "):
    """The TF-IDF featurizer's options (defaults: xmlkit.text.DEFAULTS)."""
    from xmlkit.models.base import C_INT_MAX
    from xmlkit.text import DEFAULTS as D
    return [
        click.option("--ngram-max", type=click.IntRange(1, 5), default=D["ngram_max"],
                     show_default=True, help=f"{when}word n-grams of 1 to this many words."),
        click.option("--min-df", type=click.IntRange(1, C_INT_MAX), default=D["min_df"],
                     show_default=True,
                     help=f"{when}keep the terms of at least this many documents."),
        click.option("--max-features", type=click.IntRange(1, C_INT_MAX),
                     default=D["max_features"], show_default=True,
                     help=f"{when}keep at most this many terms, the most frequent."),
        click.option("--sublinear-tf/--no-sublinear-tf", default=D["sublinear_tf"],
                     show_default=True,
                     help=f"{when}term frequency tf counted as 1 + log(tf)."),
    ]


FEATURIZER_PARAMS = ("ngram_max", "min_df", "max_features", "sublinear_tf")


def given_on_command_line(ctx, names):
    """The parameters of `names` the user typed (not left at their defaults)."""
    return [k for k in names
            if ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE]
