# Parabel's trees as they are stored and read (see ParabelTree in
# parabel_predict.pxd): each node's classifiers grouped by the node that
# scores them, feature-major (group_weights builds the groups from a tree's
# classifier rows; check_groups and check_links check a tree's arrays before
# a kernel reads them), and a small tree laid out whole for the kernel
# (lay_out_whole). A weight's classifier index is one, two or four bytes
# (col_type; read by col_at, parabel_groups.pxd).

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t

cimport numpy as cnp

import numpy as np
from sparse_rows cimport padded, sort

cnp.import_array()

cdef enum:
    # a tree of at most WHOLE_LEAVES leaves, WHOLE_CLS classifiers and
    # WHOLE_WEIGHTS weights is laid out whole too (see lay_out_whole)
    WHOLE_LEAVES = 64
    WHOLE_CLS = 1 << 16
    WHOLE_WEIGHTS = 1 << 22


cdef int _group_pass(const int64_t* cp, const int64_t* lp, const int64_t* wp,
                     const int32_t* wi, const float* wv, int64_t n, int64_t d, int64_t n_w,
                     int64_t* count, int32_t* feats, int64_t* g_ptr, int32_t* e_feat,
                     void* e_col, int col_bytes, float* e_val) noexcept nogil:
    """One pass over the groups (see ParabelTree): with e_feat NULL, size
    each group into g_ptr; else lay its weights out feature-major, features
    ascending, each feature's weights in classifier order. count: d zeros,
    left zero; feats: room for a group's distinct features. Every pointer
    and index is bounded where it is used (the rows may be a mapped file):
    returns -1 when one is out of range, else 0."""
    cdef int64_t n_rows = n + lp[n], i, j, lo, hi, q, f, k, u, n_u
    for i in range(n):
        if cp[i] < cp[i + 1]:
            lo, hi = cp[i], cp[i + 1]
        else:
            lo, hi = n + lp[i], n + lp[i + 1]
        if lo < 1 or lo > hi or hi > n_rows:
            return -1
        for j in range(lo, hi):
            if wp[j] < 0 or wp[j] > wp[j + 1] or wp[j + 1] > n_w:
                return -1
            for q in range(wp[j], wp[j + 1]):
                if wi[q] < 0 or wi[q] >= d:
                    return -1
        if e_feat == NULL:
            g_ptr[i + 1] = g_ptr[i] + (wp[hi] - wp[lo] if hi > lo else 0)
            continue
        n_u = 0
        for j in range(lo, hi):
            for q in range(wp[j], wp[j + 1]):
                f = wi[q]
                if count[f] == 0:
                    feats[n_u] = <int32_t> f
                    n_u += 1
                count[f] += 1
        sort(feats, feats + n_u)                   # (ascending: the bias last)
        k = g_ptr[i]
        for u in range(n_u):                       # each feature's place, then cursors
            f = feats[u]
            k, count[f] = k + count[f], k
        if k != g_ptr[i + 1]:
            return -1
        for j in range(lo, hi):
            for q in range(wp[j], wp[j + 1]):
                f = wi[q]
                if f < 0 or f >= d or count[f] < g_ptr[i] or count[f] >= g_ptr[i + 1]:
                    return -1
                k = count[f]
                e_feat[k] = <int32_t> f
                if col_bytes == 1:
                    (<uint8_t*> e_col)[k] = <uint8_t> (j - lo)
                elif col_bytes == 2:
                    (<uint16_t*> e_col)[k] = <uint16_t> (j - lo)
                else:
                    (<int32_t*> e_col)[k] = <int32_t> (j - lo)
                e_val[k] = wv[q]
                count[f] = k + 1
        for u in range(n_u):
            count[feats[u]] = 0
    return 0


def col_type(int64_t widest):
    """The narrowest of uint8, uint16, int32 that numbers `widest` classifiers
    of a node (a tree's e_col: the type of its widest node)."""
    return np.dtype(np.uint8 if widest <= 1 << 8 else np.uint16 if widest <= 1 << 16
                    else np.int32)


def group_weights(const int64_t[::1] cp, const int64_t[::1] lp, const int64_t[::1] wp,
                  const int32_t[::1] wi, const float[::1] wv, int64_t d):
    """A tree's classifier rows regrouped by the node that scores them (see
    ParabelTree in parabel_predict.pxd): (g_ptr, e_feat, e_col, e_val), e_col
    of the narrowest of uint8, uint16, int32 that holds the widest group.
    cp, lp: the tree's child and leaf pointers; wp, wi, wv: its classifier
    rows (node rows, then leaf entries). ValueError where they disagree."""
    cdef int64_t n = cp.shape[0] - 1, n_w, widest = 1, i
    if n < 1 or lp.shape[0] != n + 1 or lp[n] < 0 or wp.shape[0] != n + lp[n] + 1:
        raise ValueError("a tree's arrays disagree in length")
    n_w = min(wi.shape[0], wv.shape[0])
    count_a = np.zeros(d, np.int64)
    g_ptr_a = np.zeros(n + 1, np.int64)
    cdef int64_t[::1] count = count_a, g_ptr = g_ptr_a
    cdef int rc
    with nogil:
        rc = _group_pass(&cp[0], &lp[0], &wp[0], &wi[0], &wv[0], n, d, n_w, &count[0],
                         NULL, &g_ptr[0], NULL, NULL, 4, NULL)
    if rc < 0:
        raise ValueError("a tree's pointers or feature indices are out of range")
    for i in range(n):
        widest = max(widest, cp[i + 1] - cp[i], lp[i + 1] - lp[i])
    n_e = g_ptr[n]
    feats_a = np.zeros(max(1, min(d, n_e)), np.int32)
    e_feat_a = np.zeros(max(n_e, 1), np.int32)
    cdef cnp.ndarray e_col_a = np.zeros(max(n_e, 1), col_type(widest))
    e_val_a = np.zeros(max(n_e, 1), np.float32)
    cdef int32_t[::1] feats = feats_a, e_feat = e_feat_a
    cdef float[::1] e_val = e_val_a
    cdef void* ec = cnp.PyArray_DATA(e_col_a)
    cdef int col_bytes = e_col_a.dtype.itemsize
    with nogil:
        rc = _group_pass(&cp[0], &lp[0], &wp[0], &wi[0], &wv[0], n, d, n_w, &count[0],
                         &feats[0], &g_ptr[0], &e_feat[0], ec, col_bytes, &e_val[0])
    if rc < 0:
        raise ValueError("a tree's arrays changed while they were read")
    return (g_ptr_a, e_feat_a[:n_e], e_col_a[:n_e], e_val_a[:n_e])


cdef int _check_groups(int64_t n, const int64_t* cp, const int64_t* lp, const int64_t* gp,
                       const int32_t* ef, const void* ec, int col_bytes, const float* ev,
                       int64_t n_e, int64_t d) noexcept nogil:
    """0 when the groups of a tree of n nodes (child and leaf pointers
    checked) are whole (see ParabelTree): pointers within the weights and
    ascending, each group's features below d and ascending, each weight's
    classifier within its group, a feature's weights in ascending classifier
    order (one each at most), values finite; else which check failed (1..5)."""
    cdef int64_t i, e, width, col, prev = -1
    cdef float v
    if gp[0] != 0 or gp[n] != n_e:
        return 1
    for i in range(n):
        if gp[i] > gp[i + 1] or gp[i + 1] > n_e:
            return 1
        width = cp[i + 1] - cp[i] if cp[i + 1] > cp[i] else lp[i + 1] - lp[i]
        for e in range(gp[i], gp[i + 1]):
            if ef[e] < 0 or ef[e] >= d or (e > gp[i] and ef[e] < ef[e - 1]):
                return 2
            col = col_at(ec, col_bytes, e)
            if col < 0 or col >= width:
                return 3
            if e > gp[i] and ef[e] == ef[e - 1] and col <= prev:
                return 5
            prev = col
            v = ev[e]
            if v != v or v - v != 0:
                return 4
    return 0


class ChangedInUse(ValueError):
    """What predict_rows raises when a tree's arrays (a mapped file) changed
    after they were checked: an index out of range where it is used."""

    def __init__(self):
        super().__init__("a tree's arrays changed after they were checked (its file "
                         "changed in use)")


#: what a failed _check_groups code says
GROUP_FAULTS = ("", "group pointers are out of range or order",
                "group features are out of range or not ascending",
                "a weight's classifier is outside its group", "a weight is not finite",
                "a feature's weights are not in ascending classifier order")
#: the types a tree's e_col may have, by their size in bytes
COL_TYPES = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.int32)}


def check_groups(const int64_t[::1] cp, const int64_t[::1] lp, const int64_t[::1] gp,
                 const int32_t[::1] ef, ec, const float[::1] ev, int64_t d):
    """None when a tree's groups (g_ptr, e_feat, e_col, e_val; see
    ParabelTree) are whole for its child and leaf pointers cp, lp (already
    checked: ascending, of n + 1 entries) and d feature columns with the
    bias; else what is wrong. One pass, nothing allocated."""
    cdef int64_t n = cp.shape[0] - 1, n_e = ef.shape[0]
    cdef int rc, col_bytes
    cdef cnp.ndarray cols = ec
    if cols.ndim != 1 or not cols.flags.c_contiguous or cols.dtype not in COL_TYPES.values():
        return "e_col is not a vector of uint8, uint16 or int32"
    col_bytes = cols.dtype.itemsize
    if n < 1 or lp.shape[0] != n + 1 or gp.shape[0] != n + 1 or cols.shape[0] != n_e \
            or ev.shape[0] != n_e:
        return "the group arrays disagree in length"
    cdef const void* ecp = cnp.PyArray_DATA(cols)
    cdef const int32_t* efp = &ef[0] if n_e else NULL
    cdef const float* evp = &ev[0] if n_e else NULL
    with nogil:
        rc = _check_groups(n, &cp[0], &lp[0], &gp[0], efp, ecp, col_bytes, evp, n_e, d)
    return GROUP_FAULTS[rc] or None


def check_links(cp, lp, li, n_labels):
    """ValueError unless a node's children follow it (cp ascending, from 1 to
    at most the node count: a path only goes down), lp ascends from 0 to at
    most len(li), and every leaf label is below n_labels."""
    n = cp.shape[0] - 1
    if n < 1 or lp.shape[0] != n + 1 or cp[0] < 1 or cp[n] > n or lp[0] != 0 \
            or lp[n] > len(li) or np.any(np.diff(cp) < 0) or np.any(np.diff(lp) < 0):
        raise ValueError("a tree's child or leaf pointers are out of range")
    internal = np.flatnonzero(np.diff(cp) > 0)
    if np.any(cp[internal] <= internal):
        raise ValueError("a tree's node is its own descendant")
    if len(li) and (np.min(li) < 0 or np.max(li) >= n_labels):
        raise ValueError("a tree's leaf labels are out of range")


cdef int _whole_layout(int64_t n, const int64_t* cp, const int64_t* lp, const int64_t* gp,
                       const int32_t* ef, const void* ec, int col_bytes, const float* ev,
                       int64_t n_e, int64_t d, int64_t* cls0, int64_t* f_ptr, int64_t* at,
                       uint16_t* f_cls, float* f_val) noexcept nogil:
    """A tree of n nodes (links cp, lp checked, the kernel's copies) laid out
    whole, feature-major (see ParabelTree): cls0, f_ptr (d + 1 zeros in),
    f_cls, f_val; at: d entries of room. -1 at an index or value out of
    range (its groups may be a mapped file, changed after they were
    checked), else 0."""
    cdef int64_t i, e, f, k, col, width
    cdef float v
    cls0[0] = 0
    for i in range(n):
        width = cp[i + 1] - cp[i] if cp[i + 1] > cp[i] else lp[i + 1] - lp[i]
        cls0[i + 1] = cls0[i] + width
        if gp[i] < 0 or gp[i] > gp[i + 1] or gp[i + 1] > n_e:
            return -1
        for e in range(gp[i], gp[i + 1]):
            f = ef[e]
            if f < 0 or f >= d:
                return -1
            f_ptr[f + 1] += 1
    for f in range(d):
        at[f] = f_ptr[f]
        f_ptr[f + 1] += f_ptr[f]
    for i in range(n):
        for e in range(gp[i], gp[i + 1]):
            f, col, v = ef[e], col_at(ec, col_bytes, e), ev[e]
            if f < 0 or f >= d or col < 0 or col >= cls0[i + 1] - cls0[i] or \
                    at[f] >= f_ptr[f + 1] or v != v or v - v != 0:
                return -1
            k = at[f]
            at[f] = k + 1
            f_cls[k] = <uint16_t> (cls0[i] + col)
            f_val[k] = v
    return 0


def lay_out_whole(tree, int64_t d, int64_t n_labels):
    """A small tree's whole layout (see ParabelTree: at most WHOLE_LEAVES
    leaves, WHOLE_CLS classifiers and WHOLE_WEIGHTS weights), from its
    groups (checked, where they lie) and copies of its links (checked here):
    (c_ptr, l_ptr, l_idx copies, level_n, load, cls0, f_ptr, f_cls, f_val);
    None for a larger tree. ValueError when its arrays changed after they
    were checked (an index or value out of range)."""
    cdef const int64_t[::1] cp = np.array(tree["c_ptr"], dtype=np.int64)
    cdef const int64_t[::1] lp = np.array(tree["l_ptr"], dtype=np.int64)
    cdef const int32_t[::1] li = padded(np.array(tree["l_idx"], dtype=np.int32), np.int32)
    cdef const int64_t[::1] gp = np.ascontiguousarray(tree["g_ptr"], dtype=np.int64)
    cdef const int32_t[::1] ef = padded(np.ascontiguousarray(tree["e_feat"], dtype=np.int32),
                                        np.int32)
    cdef const float[::1] ev = padded(np.ascontiguousarray(tree["e_val"], dtype=np.float32),
                                      np.float32)
    cdef cnp.ndarray ec = np.ascontiguousarray(tree["e_col"])
    cdef int64_t n = cp.shape[0] - 1, n_e = tree["e_val"].shape[0], n_cls, rc, i
    if n < 1 or lp.shape[0] != n + 1 or gp.shape[0] != n + 1:
        raise ValueError("a tree's arrays disagree in length")
    n_cls = n - 1 + lp[n]
    if np.count_nonzero(np.diff(cp) == 0) > WHOLE_LEAVES or n_cls > WHOLE_CLS \
            or n_e > WHOLE_WEIGHTS or ec.dtype.itemsize not in COL_TYPES:
        return None
    check_links(np.asarray(cp), np.asarray(lp), np.asarray(li)[:lp[n]], n_labels)
    ec = padded(ec, ec.dtype)
    depth = np.zeros(n, np.int64)
    for i in range(n):                  # (a node's children follow it: checked)
        depth[cp[i]:cp[i + 1]] = depth[i] + 1
    level_n = np.bincount(depth)[depth]
    load = np.diff(np.asarray(gp, dtype=np.float64)) / d
    cls0_a = np.zeros(n + 1, np.int64)
    f_ptr_a = np.zeros(d + 1, np.int64)
    at_a = np.zeros(d, np.int64)
    f_cls_a = np.zeros(max(n_e, 1), np.uint16)
    f_val_a = np.zeros(max(n_e, 1), np.float32)
    cdef int64_t[::1] cls0 = cls0_a, f_ptr = f_ptr_a, at = at_a
    cdef uint16_t[::1] f_cls = f_cls_a
    cdef float[::1] f_val = f_val_a
    cdef const void* ecp = cnp.PyArray_DATA(ec)
    cdef int col_bytes = ec.dtype.itemsize
    with nogil:
        rc = _whole_layout(n, &cp[0], &lp[0], &gp[0], &ef[0], ecp, col_bytes, &ev[0], n_e, d,
                           &cls0[0], &f_ptr[0], &at[0], &f_cls[0], &f_val[0])
    if rc < 0 or cls0[n] != n_cls:
        raise ValueError("a tree's arrays changed after they were checked")
    return (np.asarray(cp), np.asarray(lp), np.asarray(li), level_n, load, cls0_a, f_ptr_a,
            f_cls_a, f_val_a)
