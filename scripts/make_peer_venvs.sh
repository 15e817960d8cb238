#!/bin/sh
# The virtual environments of the peers that cannot share xmlkit's
# environment (bench_peers.py runs them through peer_worker.py):
#   pecos/          libpecos (PECOS XR-Linear): numpy < 2, scipy < 1.14, torch
#   libmultilabel/  libmultilabel (linear): liblinear-multicore, whose
#                   `liblinear` module would replace liblinear-official's
# in $XMLKIT_PEER_VENVS (default work/venvs). Needs the package index.
# TORCH_WHEEL=FILE installs torch from that file first (PECOS only needs a
# CPU build; without it pip takes the index's default build).
set -e
DIR=${XMLKIT_PEER_VENVS:-work/venvs}
PY=${PYTHON:-python3}
"$PY" -m venv "$DIR/pecos"
if [ -n "$TORCH_WHEEL" ]; then "$DIR/pecos/bin/pip" install -q "$TORCH_WHEEL"; fi
"$DIR/pecos/bin/pip" install -q libpecos==1.2.8
"$PY" -m venv "$DIR/libmultilabel"
"$DIR/libmultilabel/bin/pip" install -q libmultilabel==0.10.0
