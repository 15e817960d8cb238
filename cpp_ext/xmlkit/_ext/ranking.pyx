# Top-k extraction and ranking metrics (XC repository / Matlab semantics).
#
# Tie-break everywhere: higher score first, then lower label index.

from libc.stdint cimport int32_t, int64_t
from libc.math cimport log2
from libcpp.vector cimport vector
from libcpp.utility cimport pair

import numpy as np
cimport numpy as cnp

from sparse_rows cimport (RowsOut, TopScratch, emit_scores, indptr_t, partial_sort, rows_open,
                          rows_pieces, sort)

cnp.import_array()


cdef void _topk(const indptr_t* indptr, const int32_t* indices, const float* data,
                int64_t n_rows, int k, int32_t* out_lab, float* out_val) except * nogil:
    cdef vector[pair[float, int32_t]] buf
    cdef int64_t i, j, n
    cdef int r, m
    for i in range(n_rows):
        n = indptr[i + 1] - indptr[i]
        buf.clear()
        for j in range(indptr[i], indptr[i + 1]):
            # (-score, label) ascending == score descending, then label ascending
            buf.push_back(pair[float, int32_t](-data[j], indices[j]))
        m = k if n >= k else <int> n
        partial_sort(buf.begin(), buf.begin() + m, buf.end())
        for r in range(k):
            if r < m:
                out_lab[i * k + r] = buf[r].second
                out_val[i * k + r] = -buf[r].first
            else:
                out_lab[i * k + r] = -1
                out_val[i * k + r] = 0.0


def top_k(const indptr_t[::1] indptr, const int32_t[::1] indices,
          const float[::1] data, int k):
    """Per row, the k stored entries with the highest scores (ties: lower
    label first) as (labels int32 N×k, scores float32 N×k); rows with fewer
    than k stored entries are padded with label -1 and score 0."""
    cdef int64_t n_rows = indptr.shape[0] - 1
    labels = np.empty((n_rows, k), dtype=np.int32)
    scores = np.empty((n_rows, k), dtype=np.float32)
    cdef int32_t[:, ::1] lab = labels
    cdef float[:, ::1] val = scores
    cdef int32_t dummy_i = 0
    cdef float dummy_f = 0
    cdef const int32_t* ip = &indices[0] if indices.shape[0] else &dummy_i
    cdef const float* dp = &data[0] if data.shape[0] else &dummy_f
    if n_rows > 0 and k > 0:
        with nogil:
            _topk(&indptr[0], ip, dp, n_rows, k, &lab[0, 0], &val[0, 0])
    return labels, scores


def cap_rows(const indptr_t[::1] indptr, const int32_t[::1] indices, const float[::1] data,
             int k):
    """Per row, the k stored entries with the highest scores (ties: lower
    label first; -0.0 below 0.0, no NaN), in the row's order: CSR pieces
    (indptr int64 from 0, indices int32, data float32). A count of the
    scores' top bits finds each row's cut (sparse_rows.top_cut), not a sort."""
    cdef int64_t i, n_rows = indptr.shape[0] - 1
    cdef RowsOut out
    cdef TopScratch top
    cdef int32_t dummy_i = 0
    cdef float dummy_f = 0
    cdef const int32_t* ip = &indices[0] if indices.shape[0] else &dummy_i
    cdef const float* dp = &data[0] if data.shape[0] else &dummy_f
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    rows_open(out)
    with nogil:
        for i in range(n_rows):
            emit_scores(ip + indptr[i], dp + indptr[i], indptr[i + 1] - indptr[i], k, True,
                        top, out)
    return rows_pieces(out)


#: the rows of ranking_sums' array (each K long), named for xmlkit.metrics:
#: a metric's mean over points, or a ratio metric's numerator and
#: denominator ("NAME num" / "NAME den": sums over points, divided at the end)
ROWS = ("P", "nDCG", "R", "PSP num", "PSP den", "PSnDCG num", "PSnDCG den")
cdef enum:
    ROW_P, ROW_NDCG, ROW_R, ROW_PSP_NUM, ROW_PSP_DEN, ROW_PSNDCG_NUM, ROW_PSNDCG_DEN, N_ROWS


cdef void _accumulate(const int32_t* top, int64_t n_rows, int K,
                      const indptr_t* tp, const int32_t* ti, int64_t n_labels,
                      const double* q, bint use_q, double* acc) except * nogil:
    # acc: N_ROWS rows of K (ROWS)
    cdef vector[char] mark
    cdef vector[double] disc, idcg, qs
    cdef int64_t i, j, n_true
    cdef int r, lab
    cdef double hits, dcg, ps, psd, ips, ipsd, rel
    mark.resize(n_labels, 0)
    disc.resize(K)
    idcg.resize(K + 1)
    idcg[0] = 1.0
    for r in range(K):
        disc[r] = 1.0 / log2(r + 2.0)
        idcg[r + 1] = idcg[r] + disc[r] if r > 0 else disc[0]
    for i in range(n_rows):
        n_true = tp[i + 1] - tp[i]
        for j in range(tp[i], tp[i + 1]):
            mark[ti[j]] = 1
        hits = dcg = ps = psd = 0.0
        for r in range(K):
            lab = top[i * K + r]
            rel = 1.0 if (lab >= 0 and mark[lab]) else 0.0
            hits += rel
            dcg += rel * disc[r]
            acc[ROW_P * K + r] += hits / (r + 1)
            if n_true > 0:
                acc[ROW_NDCG * K + r] += dcg / idcg[min(<int64_t> (r + 1), n_true)]
                acc[ROW_R * K + r] += hits / n_true
            if use_q and rel > 0:
                ps += q[lab]
                psd += q[lab] * disc[r]
            if use_q:
                acc[ROW_PSP_NUM * K + r] += ps / (r + 1)
                acc[ROW_PSNDCG_NUM * K + r] += psd
        if use_q:
            # best achievable: the point's true labels ranked by inverse propensity
            qs.clear()
            for j in range(tp[i], tp[i + 1]):
                qs.push_back(-q[ti[j]])
            sort(qs.begin(), qs.end())
            ips = ipsd = 0.0
            for r in range(K):
                if r < <int64_t> qs.size():
                    ips -= qs[r]
                    ipsd -= qs[r] * disc[r]
                acc[ROW_PSP_DEN * K + r] += ips / (r + 1)
                acc[ROW_PSNDCG_DEN * K + r] += ipsd
        for j in range(tp[i], tp[i + 1]):
            mark[ti[j]] = 0


def ranking_sums(const int32_t[:, ::1] top, const indptr_t[::1] true_indptr,
                 const int32_t[::1] true_indices, int64_t n_labels, inv_prop):
    """Sums over points, for k = 1..K (K = top.shape[1]), of the per-point
    terms of P@k, nDCG@k, recall@k and of the numerators and denominators of
    PSP@k and PSnDCG@k. Returns a len(ROWS)×K float64 array, rows named by
    ROWS."""
    cdef int64_t n_rows = top.shape[0]
    cdef int K = top.shape[1]
    acc = np.zeros((N_ROWS, K), dtype=np.float64)
    cdef double[:, ::1] a = acc
    cdef const double[::1] qv
    cdef const double* qp = NULL
    cdef bint use_q = inv_prop is not None
    cdef int32_t dummy_i = 0
    cdef const int32_t* tip = &true_indices[0] if true_indices.shape[0] else &dummy_i
    if use_q:
        qv = np.ascontiguousarray(inv_prop, dtype=np.float64)
        if qv.shape[0] != n_labels:
            raise ValueError("inv_prop must have one value per label")
        qp = &qv[0] if n_labels else NULL
    if n_rows > 0 and K > 0:
        with nogil:
            _accumulate(&top[0, 0], n_rows, K, &true_indptr[0], tip, n_labels,
                        qp, use_q, &a[0, 0])
    return acc
