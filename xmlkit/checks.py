"""Checks of arrays read from model files, before any kernel sees them, and
of training data before a family sees them (training_rows, empty_side).

A loader never trusts an array: index pointers must start at 0, never
decrease and end at the entry count; indices must lie in their range; values
must be finite; integer arrays must hold integers. Each check raises
XmlkitError naming the file (`name`) and the array, so a damaged or crafted
model folder is refused in one line (exit 2) instead of crashing a kernel or
giving other scores.
"""
import numpy as np

from xmlkit.errors import XmlkitError


class DamagedModel(XmlkitError):
    """A model file does not hold what its format says."""

    def __init__(self, name, what):
        super().__init__(f"{name}: damaged model file: {what}")


def need(arrays, keys, name):
    """Raise DamagedModel naming file `name` unless `arrays` has `keys`."""
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise DamagedModel(name, f"lacks arrays {missing}")


def ints(a, name, what, shape=None):
    """`a` as a numpy integer array (of `shape` when given)."""
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        raise DamagedModel(name, f"{what} holds {a.dtype} values, not integers")
    if shape is not None and a.shape != tuple(shape):
        raise DamagedModel(name, f"{what} has shape {a.shape}, expected {tuple(shape)}")
    return a


def floats(a, name, what, shape=None):
    """`a` as a numpy float array of finite values (of `shape` when given)."""
    a = np.asarray(a)
    if a.dtype.kind != "f":
        raise DamagedModel(name, f"{what} holds {a.dtype} values, not floats")
    if shape is not None and a.shape != tuple(shape):
        raise DamagedModel(name, f"{what} has shape {a.shape}, expected {tuple(shape)}")
    if a.size and not np.isfinite(a).all():
        raise DamagedModel(name, f"{what} holds NaN or infinite values")
    return a


def in_range(a, lo, hi, name, what):
    """Integer array `a` with every entry in [lo, hi)."""
    a = ints(a, name, what)
    if a.size and (a.min() < lo or a.max() >= hi):
        raise DamagedModel(name, f"{what} has entries outside [{lo}, {hi})")
    return a


def pointers(ptr, n_rows, name, what):
    """CSR index pointers of n_rows rows: start at 0, never decrease."""
    ptr = ints(ptr, name, what, (n_rows + 1,))
    if ptr[0] != 0 or (n_rows and np.any(ptr[1:] < ptr[:-1])):
        raise DamagedModel(name, f"{what} are not index pointers (0, non-decreasing)")
    return ptr


def csr(ptr, idx, val, n_rows, n_cols, name, what):
    """CSR arrays (ptr, idx, val) of an n_rows x n_cols matrix, checked:
    pointers, one index and one finite value per entry, indices < n_cols."""
    ptr = pointers(ptr, n_rows, name, f"{what} pointers")
    idx = in_range(idx, 0, n_cols, name, f"{what} indices")
    val = floats(val, name, f"{what} values")
    if idx.ndim != 1 or val.ndim != 1 or not ptr[-1] == len(idx) == len(val):
        raise DamagedModel(name, f"{what}: pointers, indices and values disagree in length")
    return ptr, idx, val


# ---- training data

def empty_side(X, Y):
    """"features" or "labels" when that matrix has 0 columns (nothing to
    train on), else None: the rule of training_rows, which xml-train applies
    first to name the file."""
    return next((what for what, M in (("features", X), ("labels", Y)) if M.shape[1] == 0),
                None)


def training_rows(X, Y, min_points=1):
    """Features and labels as Rows, checked: same number of points, at least
    `min_points` of them, some label, finite feature values."""
    from xmlkit.csr import as_rows
    X, Y = as_rows(X, "features"), as_rows(Y, "labels")
    if X.shape[0] != Y.shape[0]:
        raise XmlkitError(f"features have {X.shape[0]} rows but labels {Y.shape[0]}")
    if X.shape[0] < min_points:
        raise XmlkitError(f"at least {min_points} training point(s) needed, got {X.shape[0]}")
    what = empty_side(X, Y)
    if what:
        raise XmlkitError(f"the {what} have 0 columns: nothing to train on")
    if not np.any(Y.data):
        raise XmlkitError("no training point has a label: nothing to train on")
    if not np.all(np.isfinite(X.data)):
        raise XmlkitError("features contain NaN or inf")
    return X, Y
