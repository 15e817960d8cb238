import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data_samples"
SHARED = Path(os.environ.get("XMLKIT_SHARED", ROOT.parent / "shared"))
BIN = Path(sys.executable).parent


@pytest.fixture
def shared():
    """The project's shared data folder (../shared); tests using it skip without it."""
    if not (SHARED / "fixtures").is_dir():
        pytest.skip(f"shared data not found at {SHARED}")
    return SHARED


def run_cli(*args, **kw):
    """Run an xmlkit command as a user would (a subprocess)."""
    prog, rest = args[0], [str(a) for a in args[1:]]
    exe = BIN / prog
    cmd = [str(exe)] + rest if exe.exists() else [prog] + rest
    return subprocess.run(cmd, capture_output=True, text=True, **kw)
