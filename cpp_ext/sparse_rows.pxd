# Shared declarations for CSR rows, cimported by the other extensions.
#
# Everything here is a type or an inline function (no module-level state), so a
# .pyx only needs `from sparse_rows cimport ...` with cpp_ext/ on the include path.
#
# Memory: a failed allocation must become a MemoryError, never std::terminate
# nor an error printed as "ignored" while the work goes on. Every C++ call
# that allocates is one Cython declares `except +` (vector.resize, push_back,
# insert, assign(first, last); fill_vector below for assign(n, x), which
# Cython declares without it), and every function that makes one lets the
# error out: `except -1` (an int result) or `except *`, up to the kernel's
# def, never `noexcept`. (A vector copied by `=` is not caught either: copy
# with assign(first, last).)

from libc.math cimport exp
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

# CSR index pointers may be int32 or int64 (scipy picks by nnz).
ctypedef fused indptr_t:
    int32_t
    int64_t


# Feature values the kernels read: float32, or float64 where sums must be exact.
ctypedef fused value_t:
    float
    double


cimport numpy as cnp
from libc.string cimport memcpy


cdef inline object array_copy(const void* src, cnp.npy_intp n, int typenum):
    """A new 1-d numpy array of n items of numpy type `typenum` (cnp.NPY_INT32,
    ...) copied from src. The calling module must have run cnp.import_array()."""
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(1, &n, typenum, 0)
    if n:
        memcpy(cnp.PyArray_DATA(out), src, n * cnp.PyArray_ITEMSIZE(out))
    return out


from libcpp.vector cimport vector


cdef extern from *:
    """
    // v.assign(n, x) as a call Cython can catch (see fill_vector)
    #include <type_traits>
    template <class V, class T> static inline void xk_fill_vector(V& v, size_t n, const T& x) {
        v.assign(n, static_cast<typename std::remove_reference<V>::type::value_type>(x));
    }
    """
    # v.assign(n, x) (every entry x), whose failed allocation is a MemoryError
    void fill_vector "xk_fill_vector" [V, T](V& v, size_t n, T x) except + nogil
from libcpp.utility cimport pair


# The algorithms the kernels run on numbers and pairs of numbers, in place:
# nothing there can throw, so they are declared without the `except +` of
# libcpp.algorithm (whose catch would be one more error path to carry).
cdef extern from "<algorithm>" namespace "std" nogil:
    void sort[Iter](Iter first, Iter last)
    void sort[Iter, Compare](Iter first, Iter last, Compare comp)
    void partial_sort[Iter](Iter first, Iter middle, Iter last)
    void nth_element[Iter](Iter first, Iter nth, Iter last)
    Iter lower_bound[Iter, T](Iter first, Iter last, const T& value)


# Rows a kernel writes: CSR pieces with indptr from 0 (start with rows_open).
cdef struct RowsOut:
    vector[int64_t] ptr                  # row r: entries ptr[r] .. ptr[r + 1] - 1
    vector[int32_t] idx                  # label of each entry, ascending per row
    vector[float] val                    # score of each entry


cdef inline int rows_open(RowsOut& out) except -1 nogil:
    out.ptr.clear()
    out.idx.clear()
    out.val.clear()
    out.ptr.push_back(0)
    return 0


cdef extern from *:
    """
    #include <cstdint>
    #include <cstring>
    // a float's bits as an unsigned key in the floats' order (-0.0 just below
    // +0.0): negative ones' bits flipped, the others' sign bit set
    static inline uint32_t xk_float_key(float v) {
        uint32_t u;
        std::memcpy(&u, &v, sizeof u);
        return u ^ ((uint32_t) -(int32_t) (u >> 31) | 0x80000000u);
    }
    """
    uint32_t float_key "xk_float_key" (float v) noexcept nogil


cdef enum:
    # a score's bucket in top_cut: the top 11 bits of its float_key
    KEY_SHIFT = 21
    KEY_BUCKETS = 2048


cdef struct TopScratch:
    # emit_scores' working space, kept between a kernel's rows
    vector[uint32_t] count               # KEY_BUCKETS zeros between calls
    vector[pair[uint32_t, int32_t]] tied  # (~key, label) of the cut's bucket
    vector[pair[int32_t, float]] sel     # the kept entries, to be sorted by label


cdef inline int top_cut(const int32_t* labels, const float* vals, size_t n, size_t topk,
                        TopScratch& s, uint32_t* cut_key, int32_t* cut_label) except -1 nogil:
    """The last of the topk best of n entries (labels, scores vals; 0 < topk
    < n) as emit_scores ranks them (score descending, ties to the lower label):
    an entry is among the topk when its float_key is above cut_key, or equal
    with a label at most cut_label. A count of the keys' top bits finds the
    bucket the cut falls in; only that bucket's entries are ranked (no
    comparison sort over the row, whose branches its scores' order cannot
    predict)."""
    cdef size_t a, above = 0, at
    cdef uint32_t b, k, top = 0
    if s.count.size() < KEY_BUCKETS:
        fill_vector(s.count, KEY_BUCKETS, 0)
    for a in range(n):
        b = float_key(vals[a]) >> KEY_SHIFT
        s.count[b] += 1
        top = b if b > top else top
    b = top                           # (the counts sum to n > topk: b stays >= 0)
    while above + s.count[b] < topk:
        above += s.count[b]
        b -= 1
    s.tied.clear()
    for a in range(n):
        k = float_key(vals[a])
        s.count[k >> KEY_SHIFT] = 0
        if k >> KEY_SHIFT == b:
            s.tied.push_back(pair[uint32_t, int32_t](~k, labels[a]))
    at = topk - above - 1
    nth_element(s.tied.begin(), s.tied.begin() + at, s.tied.end())
    cut_key[0], cut_label[0] = ~s.tied[at].first, s.tied[at].second
    return 0


cdef inline int emit_scores(const int32_t* labels, const float* vals, size_t n, int topk,
                            bint keep_order, TopScratch& s, RowsOut& out) except -1 nogil:
    """Append one output row of n entries (labels, their scores vals, as
    written): the topk best (every entry when topk <= 0), ties to the lower
    label (-0.0 ranks below 0.0; no score may be NaN), in ascending label
    order (scores are compared as written, float32, so that the ranking and
    the output agree). keep_order: they
    are written in the order given (the caller's, ascending); else the kept
    ones are sorted. -1 with MemoryError raised when the row cannot be
    stored."""
    cdef size_t a
    cdef uint32_t cut_key = 0, k
    cdef int32_t cut_label = -1
    cdef bint every = topk <= 0 or n <= <size_t> topk
    if not every:
        top_cut(labels, vals, n, topk, s, &cut_key, &cut_label)
    s.sel.clear()
    for a in range(n):
        k = float_key(vals[a])
        if not (every or k > cut_key or (k == cut_key and labels[a] <= cut_label)):
            continue
        if keep_order:
            out.idx.push_back(labels[a])
            out.val.push_back(vals[a])
        else:
            s.sel.push_back(pair[int32_t, float](labels[a], vals[a]))
    sort(s.sel.begin(), s.sel.end())
    for a in range(s.sel.size()):
        out.idx.push_back(s.sel[a].first)
        out.val.push_back(s.sel[a].second)
    out.ptr.push_back(out.idx.size())
    return 0


cdef inline int64_t add_label_rows(const int64_t* xp, const int32_t* xi, const value_t* xv,
                                   const int32_t* pts, int64_t n_pts, double c, double* acc,
                                   signed char* seen, int32_t* touched) noexcept nogil:
    """acc[f] += c * value for every entry (f, value) of the rows pts[0 ..
    n_pts - 1] (CSR xp, xi, xv), points in the given order: a label's sum of
    its points' rows. Features not marked in `seen` yet are marked and
    listed in `touched`, which is sorted ascending; returns their number
    (the caller resets acc and seen on them)."""
    cdef int64_t k, e, n_touched = 0
    cdef int32_t f
    for k in range(n_pts):
        for e in range(xp[pts[k]], xp[pts[k] + 1]):
            f = xi[e]
            if not seen[f]:
                seen[f] = 1
                touched[n_touched] = f
                n_touched += 1
            acc[f] += c * xv[e]
    sort(touched, touched + n_touched)
    return n_touched


cdef inline uint32_t tree_seed(uint64_t seed, uint64_t tree) noexcept nogil:
    """splitmix64 of (seed, tree): independent random streams per tree."""
    cdef uint64_t z = seed * 0x9E3779B97F4A7C15ULL + tree + 0x632BE59BD9B4E019ULL
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    z = z ^ (z >> 31)
    return <uint32_t> (z & 0xFFFFFFFFULL)


cdef inline double sigmoid(double z) noexcept nogil:
    """1 / (1 + e^-z) without overflow (the kernels' one logistic function;
    the tree solver's _sigmoid_softplus also returns log(1 + e^z))."""
    cdef double e
    if z >= 0:
        return 1.0 / (1.0 + exp(-z))
    e = exp(z)
    return e / (1.0 + e)


cdef extern from "<random>" namespace "std" nogil:
    cdef cppclass mt19937:
        mt19937()
        void seed(uint32_t seed)
        uint32_t operator()()
        void discard(unsigned long long z)


cdef extern from *:
    """
    #include <vector>
    template <class T> static void xk_vector_free(PyObject* capsule) {
        delete static_cast<std::vector<T>*>(PyCapsule_GetPointer(capsule, "xk_vector"));
    }
    // A 1-d numpy array of numpy type typenum over v's buffer (v non-empty),
    // which it takes: v is left empty, and a capsule that owns the buffer
    // (the array's base) frees it when the array goes.
    template <class T> static PyObject* xk_vector_array(std::vector<T>& v, int typenum) {
        npy_intp n = (npy_intp) v.size();
        std::vector<T>* owner = new std::vector<T>();
        owner->swap(v);
        PyObject* capsule = PyCapsule_New(owner, "xk_vector", xk_vector_free<T>);
        if (capsule == NULL) {
            v.swap(*owner);
            delete owner;
            return NULL;
        }
        PyObject* out = PyArray_SimpleNewFromData(1, &n, typenum, owner->data());
        if (out == NULL) {
            Py_DECREF(capsule);
            return NULL;
        }
        if (PyArray_SetBaseObject((PyArrayObject*) out, capsule) < 0) {   // (takes capsule)
            Py_DECREF(out);
            return NULL;
        }
        return out;
    }
    """
    object xk_vector_array[T](vector[T]& v, int typenum) except +


cdef inline tuple csr_pieces(vector[int64_t]& ptr, vector[int32_t]& idx, vector[float]& val):
    """Rows written by a kernel as numpy arrays (indptr int64, indices int32,
    data float32). The arrays take the vectors' buffers, which are left
    empty: no copy, so that a chunk's scores are not held twice."""
    if ptr.empty() or idx.empty():      # (an empty vector may have no buffer)
        return (array_copy(ptr.data(), ptr.size(), cnp.NPY_INT64),
                array_copy(idx.data(), idx.size(), cnp.NPY_INT32),
                array_copy(val.data(), val.size(), cnp.NPY_FLOAT32))
    a = xk_vector_array[int64_t](ptr, cnp.NPY_INT64)
    b = xk_vector_array[int32_t](idx, cnp.NPY_INT32)
    c = xk_vector_array[float](val, cnp.NPY_FLOAT32)
    return (a, b, c)


cdef inline tuple rows_pieces(RowsOut& out):
    """The rows of `out` as numpy CSR pieces (see csr_pieces)."""
    return csr_pieces(out.ptr, out.idx, out.val)


cdef inline object padded(object a, object dtype):
    """a as a contiguous 1-d array of dtype, a single 0 when a is empty (so
    that &a[0] is always valid; the kernels never read past the real end)."""
    import numpy
    a = numpy.ascontiguousarray(a, dtype=dtype).reshape(-1)
    return a if a.shape[0] else numpy.zeros(1, dtype)


cdef inline int check_row_range(Py_ssize_t n_rows, int64_t r0, int64_t r1) except -1:
    """Rows r0..r1-1 of a matrix of n_rows rows: raises ValueError outside."""
    if not 0 <= r0 <= r1 <= n_rows:
        raise ValueError(f"row range {r0}..{r1} outside the {n_rows} rows")
    return 0


cdef inline tuple rows_in(X, int64_t r0, int64_t r1):
    """(indptr, indices, data) of a CSR matrix X whose rows r0..r1-1 a kernel
    reads: indptr as it is (int32 or int64, for a fused `indptr_t` argument),
    indices int32 and data float32 padded (see padded). Raises ValueError when
    the rows are outside X."""
    check_row_range(X.indptr.shape[0] - 1, r0, r1)
    import numpy
    return (X.indptr, padded(X.indices, numpy.int32), padded(X.data, numpy.float32))
