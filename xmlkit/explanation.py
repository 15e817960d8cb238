"""Explanations of predictions: for each predicted label of a row, the
features that moved its score most, with their signed contributions
(`model.explain(X, k, n_features)`, `xml-predict --explain N`).

A contribution is what the feature adds to the label's score:

* leave-one-out ("removal"): the label's score with the row as it is minus
  its score with the feature removed from the row (the tree families,
  exactly; embed, exactly); a feature whose removal changes nothing
  contributes 0 and is not listed;
* additive ("margin"): the feature's term w·x of the label's margin (the
  linear family, whose scores are a link of the margin: the terms and the
  label's bias add up to it).

An :class:`Explanation` holds the explained labels (a row's labels and
scores: the rows of `scores`, as predict writes them) and, per label (an
entry of `scores`, in its CSR order), its features, largest |contribution|
first. Everything here is numpy on whole arrays; the per-row work is the
families' kernels.
"""
import numpy as np

from xmlkit.csr import (Rows, as_rows, model_rows, rows_ascending, summed_duplicates,
                        without_zeros)
from xmlkit.errors import XmlkitError

#: what a contribution is, by the Explanation's `kind`
KINDS = {"removal": "score with the feature minus score without it (exact)",
         "margin": "the feature's term w·x of the label's margin (exact)"}
#: labels explained per row when no k is given (xml-predict --explain)
EXPLAIN_K = 5
#: pairs (label of a row, feature of the row) handled at a time
PAIR_BLOCK = 1 << 18


class Explanation:
    """The explained labels of rows and the features behind each.

    scores: Rows (N × L) of the labels explained per row and their scores;
    ptr (int64, scores.nnz + 1): the features of entry a of scores (row i's
    entries are scores.indptr[i] .. scores.indptr[i + 1] - 1, labels
    ascending) are features[ptr[a]:ptr[a + 1]], with their contributions
    (float64), largest |contribution| first (ties: lower feature first);
    kind: "removal" or "margin" (see KINDS)."""

    def __init__(self, scores, ptr, features, contributions, kind):
        if kind not in KINDS:
            raise ValueError(f"kind is one of {sorted(KINDS)}")
        self.scores, self.ptr, self.features = scores, ptr, features
        self.contributions, self.kind = contributions, kind

    @property
    def shape(self):
        return self.scores.shape

    def row(self, i):
        """Row i's labels, best score first (ties: lower label first), as
        [(label, score, [(feature, contribution), ...]), ...]."""
        a0, a1 = int(self.scores.indptr[i]), int(self.scores.indptr[i + 1])
        order = np.lexsort((self.scores.indices[a0:a1], -self.scores.data[a0:a1])) + a0
        return [(int(self.scores.indices[a]), float(self.scores.data[a]),
                 list(zip(self.features[self.ptr[a]:self.ptr[a + 1]].tolist(),
                          self.contributions[self.ptr[a]:self.ptr[a + 1]].tolist())))
                for a in order]

    def with_scores(self, scores, contributions):
        """The same features with other scores of the same entries and
        other contributions (in this one's order), each label's features
        ordered again as these compare."""
        entry = np.repeat(np.arange(len(self.ptr) - 1), np.diff(self.ptr))
        return strongest(scores, entry, self.features, contributions,
                         int(np.diff(self.ptr).max(initial=0)), self.kind)


def strongest(scores, entry, features, effects, n, kind):
    """The Explanation keeping, per entry of `scores`, the n features of
    largest |effect| among (entry, feature, effect) triples (zeros dropped;
    ties: lower feature first)."""
    entry = np.asarray(entry, np.int64)
    features = np.asarray(features, np.int32)
    effects = np.asarray(effects, np.float64)
    keep = effects != 0
    entry, features, effects = entry[keep], features[keep], effects[keep]
    order = np.lexsort((features, -np.abs(effects), entry))
    entry, features, effects = entry[order], features[order], effects[order]
    counts = np.bincount(entry, minlength=scores.nnz)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    rank = np.arange(len(entry)) - starts[entry]
    keep = rank < n
    ptr = np.zeros(scores.nnz + 1, np.int64)
    np.cumsum(np.minimum(counts, n), out=ptr[1:])
    return Explanation(scores, ptr, features[keep], effects[keep], kind)


def check_n_features(n_features):
    """n_features as an int >= 1 (XmlkitError otherwise)."""
    if isinstance(n_features, (bool, np.bool_)) or not isinstance(n_features,
                                                                  (int, np.integer)) \
            or n_features < 1:
        raise XmlkitError(f"n_features must be an integer >= 1, got {n_features!r}")
    return int(n_features)


def explained_rows(X, n_features):
    """X as Rows for explanation: checked against the model's features,
    duplicate entries added up, explicit zeros dropped (removing a feature
    removes all of it; a zero has nothing to remove)."""
    return without_zeros(summed_duplicates(model_rows(X, n_features)))


def label_rows(labels, n_rows, n_labels):
    """The labels to explain (any sparse matrix or Rows, N × L: the
    pattern of its entries) as Rows, checked."""
    S = as_rows(labels, "labels")
    if S.shape != (n_rows, n_labels):
        raise XmlkitError(f"labels has shape {S.shape}, expected ({n_rows}, {n_labels})")
    return S


def row_pairs(R, S, r0, r1):
    """Every (entry of S, entry of R) pair of the same row, for rows
    r0..r1-1: (a, e) arrays, grouped by a, e ascending within."""
    n_lab = np.diff(S.indptr[r0:r1 + 1]).astype(np.int64)
    n_feat = np.diff(R.indptr[r0:r1 + 1]).astype(np.int64)
    per_entry = np.repeat(n_feat, n_lab)
    a = np.repeat(np.arange(S.indptr[r0], S.indptr[r1], dtype=np.int64), per_entry)
    first = np.repeat(np.repeat(R.indptr[r0:r1].astype(np.int64), n_lab), per_entry)
    starts = np.concatenate([[0], np.cumsum(per_entry)[:-1]]).astype(np.int64)
    e = first + np.arange(len(a), dtype=np.int64) - np.repeat(starts, per_entry)
    return a, e


def pair_blocks(R, S, limit=PAIR_BLOCK):
    """(r0, r1) blocks of rows of about `limit` pairs (row_pairs) each
    (a row of more is a block of its own)."""
    weight = np.diff(S.indptr).astype(np.int64) * np.diff(R.indptr).astype(np.int64)
    group = (np.cumsum(weight) - weight) // max(1, int(limit))
    cuts = np.flatnonzero(np.diff(group)) + 1
    bounds = np.concatenate([[0], cuts, [R.shape[0]]]).astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def ascending_rows(ptr, idx, val, shape):
    """Rows of CSR arrays (a model's, possibly read-only), each row's
    indices sorted: the arrays themselves when they are (score_at searches
    them), else sorted copies."""
    ptr = np.asarray(ptr, np.int64)
    idx = np.asarray(idx, np.int32)
    val = np.asarray(val, np.float32)
    if not rows_ascending(ptr, idx):
        import scipy.sparse as sp
        M = sp.csr_matrix((val.copy(), idx.copy(), ptr.copy()), shape=shape)
        M.has_sorted_indices = False
        M.sum_duplicates()
        return as_rows(M, "model rows")
    return Rows(ptr, idx, val, shape)


class EntryIndex:
    """Look-ups in the entries of a CSR matrix (Rows or scipy; each row's
    indices ascending), its keys made once for any number of queries:
    values(rows, cols) and at_least(rows, values)."""

    def __init__(self, S):
        self.S = S = as_rows(S, "scores")
        self.row_of = np.repeat(np.arange(S.shape[0], dtype=np.int64), np.diff(S.indptr))
        self.keys = self.row_of * (S.shape[1] + 1) + S.indices
        self._ranked = None

    def values(self, rows, cols):
        """S[rows[i], cols[i]] for each i (float64; 0 where S has no entry)."""
        S = self.S
        rows = np.asarray(rows, np.int64)
        cols = np.asarray(cols, np.int64)
        at = np.searchsorted(self.keys, rows * (S.shape[1] + 1) + cols)
        found = (at >= S.indptr[rows]) & (at < S.indptr[rows + 1])
        found[found] = S.indices[at[found]] == cols[found]
        out = np.zeros(len(rows), np.float64)
        out[found] = S.data[at[found]]
        return out

    def at_least(self, rows, values):
        """How many entries of row rows[i] are >= values[i], for each i: a
        search of (row, rank of the value among S's values) keys, sorted
        once."""
        S = self.S
        if self._ranked is None:
            distinct = np.unique(S.data.astype(np.float64))
            keys = self.row_of * (len(distinct) + 1) + np.searchsorted(distinct, S.data)
            self._ranked = (distinct, np.sort(keys))
        distinct, keys = self._ranked
        rows = np.asarray(rows, np.int64)
        rank = np.searchsorted(distinct, np.asarray(values, np.float64), side="left")
        first = np.searchsorted(keys, rows * (len(distinct) + 1) + rank, side="left")
        return S.indptr[rows + 1] - first


def score_at(S, rows, labels):
    """S[rows, labels] for arrays of positions (0 where S has no entry): one
    look-up (EntryIndex)."""
    return EntryIndex(S).values(rows, labels)


def rows_without(R, src, drop):
    """Rows: row src[i] of R without its entry drop[i] (-1: the row whole),
    for each i."""
    src = np.asarray(src, np.int64)
    drop = np.asarray(drop, np.int64)
    copy_len = np.diff(R.indptr)[src].astype(np.int64) - (drop >= 0)
    ptr = np.zeros(len(src) + 1, np.int64)
    np.cumsum(copy_len, out=ptr[1:])
    take = np.repeat(R.indptr[src].astype(np.int64), copy_len) + \
        np.arange(ptr[-1], dtype=np.int64) - np.repeat(ptr[:-1], copy_len)
    d = np.repeat(drop, copy_len)
    take += (d >= 0) & (take >= d)                      # (skipping the dropped one)
    return Rows(ptr, R.indices[take], R.data[take], (len(src), R.shape[1]))


def removal_effects(score, R, S):
    """(entry, feature, effect) of every label of S (an entry) and feature
    of its row by brute force: the row scored by score(Rows) (N' × L, every
    label: what the family computes) as it is and once per feature without
    it, the label's score difference. Costs one scoring per (row, feature):
    for families with no cheaper exact way."""
    entries, feats, effects = [], [], []
    most = max(1, int(np.diff(S.indptr).max(initial=1)))
    for r0, r1 in pair_blocks(R, S, limit=PAIR_BLOCK // most):
        # row r0 + i is copy i; then each row once per feature, without it
        lens = np.diff(R.indptr[r0:r1 + 1]).astype(np.int64)
        src = np.concatenate([np.arange(r0, r1), np.repeat(np.arange(r0, r1), lens)])
        drop = np.concatenate([np.full(r1 - r0, -1, np.int64),
                               np.arange(R.indptr[r0], R.indptr[r1], dtype=np.int64)])
        scored = as_rows(score(rows_without(R, src, drop)), "scores")
        # every (label of the row, feature of the row) pair
        a, e = row_pairs(R, S, r0, r1)
        labels = S.indices[a].astype(np.int64)
        row = np.searchsorted(S.indptr, a, side="right") - 1
        before = score_at(scored, row - r0, labels)
        after = score_at(scored, (r1 - r0) + e - R.indptr[r0], labels)
        entries.append(a)
        feats.append(R.indices[e])
        effects.append(before - after)
    if not entries:
        return np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0)
    return np.concatenate(entries), np.concatenate(feats), np.concatenate(effects)
