"""Processes: whether one still runs, and workers that end with their parent.

alive(pid): whether process `pid` of this host runs. POSIX: kill(pid, 0).
Windows: OpenProcess and its exit code (os.kill there would end it).
Elsewhere: assumed alive (so that nothing of it is removed).

die_with(parent): in a worker process, end it when process `parent` ends,
however it ends:
- Linux: the kernel sends the worker SIGKILL when its parent ends
  (prctl(PR_SET_PDEATHSIG));
- elsewhere: a daemon thread checks every POLL_SECONDS that the parent
  runs, and ends the worker when it does not (os._exit).
backend() says which ("prctl" or "poll").

Nothing platform-only is loaded when xmlkit is imported: each is looked up
where it is first used.
"""
import os
import sys
import threading
import time

#: how often a worker without a parent-death signal checks its parent
POLL_SECONDS = 0.5
PR_SET_PDEATHSIG = 1            # (linux/prctl.h)


def _libc_function(name):
    """The C library's function `name` (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError, ImportError):
        return None


def alive(pid):
    """Whether process `pid` of this host runs (see the module doc)."""
    if sys.platform == "win32":
        return _alive_windows(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def _alive_windows(pid):
    try:
        import ctypes
        kernel32 = ctypes.windll.kernel32
    except (ImportError, AttributeError, OSError):
        return True
    QUERY, STILL_ACTIVE, ACCESS_DENIED = 0x1000, 259, 5
    handle = kernel32.OpenProcess(QUERY, False, pid)
    if not handle:
        return kernel32.GetLastError() == ACCESS_DENIED       # another user's process
    try:
        code = ctypes.c_ulong()
        if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
            return True
        return code.value == STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def backend():
    """How die_with ends a worker whose parent ended: prctl or poll."""
    return "prctl" if _libc_function("prctl") is not None else "poll"


def die_with(parent):
    """End this worker process when process `parent` ends (see the module
    doc). Call first thing in the worker."""
    prctl = _libc_function("prctl")
    if prctl is not None:
        import signal
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    else:
        threading.Thread(target=_watch, args=(parent,), daemon=True,
                         name="xmlkit-parent-watch").start()
    if not _parent_runs(parent):           # it ended before the watch began
        os._exit(1)


def _parent_runs(parent):
    # (a worker whose parent ended is adopted: its parent pid changes)
    return os.getppid() == parent and alive(parent)


def _watch(parent):
    while _parent_runs(parent):
        time.sleep(POLL_SECONDS)
    os._exit(1)
