# What the kernels of FastXML tree growth share (a .pxd without a module:
# inline code and C++ declarations, compiled into each kernel that cimports
# them):
#   fastxml_solver     SeparatorSolver: a node's L1-regularised logistic
#                      regression (newGLMNET);
#   fastxml_partition  NdcgPartition: the criterion, a node's points in two
#                      by the nDCG alternation;
#   fastxml_separator  NodeSeparator: the splitter, the hyperplane between
#                      the two sides (SeparatorSolver, or liblinear);
#   fastxml_tree       TreeGrower (the builder), LargeNodeGate, Crew.
# Here: the pass over a node's rows (_fetch_ahead, _gather), scratch that
# follows the nodes' sizes (_give_back, _resize, LARGE_NODE) and the
# gate's slots (xk_slots), which the separator and the solver use too.

from libc.stdint cimport int32_t, int64_t
from libcpp cimport bool as cbool
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort


cdef extern from *:
    """
    #include <cstdint>
    #include "xk_portable.h"
    // Ask the cache for the row of point pts[a + XK_AHEAD] (its start in
    // idx, and in val when not NULL) and for the row pointer of point
    // pts[a + 2 XK_AHEAD], in a pass over the rows of the points pts[0:n]:
    // a node's points are spread over X, and without it each row waits
    // for memory. (In C, always inlined: GCC drops a call to a function
    // whose only effect is a prefetch before it would inline it.)
    #define XK_AHEAD 4
    static XK_ALWAYS_INLINE void xk_fetch_ahead(
            const int32_t* pts, int64_t a, int64_t n, const int64_t* ptr,
            const int32_t* idx, const float* val) {
        if (a + 2 * XK_AHEAD < n) XK_PREFETCH(&ptr[pts[a + 2 * XK_AHEAD]]);
        if (a + XK_AHEAD < n) {
            int64_t e = ptr[pts[a + XK_AHEAD]];
            XK_PREFETCH(&idx[e]);
            if (val) XK_PREFETCH(&val[e]);
        }
    }
    """
    void _fetch_ahead "xk_fetch_ahead" (const int32_t* pts, int64_t a, int64_t n,
                                        const int64_t* ptr, const int32_t* idx,
                                        const float* val) noexcept nogil


cdef extern from *:
    """
    #include <cstdint>
    // Give back v's memory (its entries go too) when it has room for more
    // than twice n entries: call before v is sized to n. Nodes shrink level
    // by level: scratch sized for the root would otherwise stay at that
    // size for the whole tree, and in every thread (the root's feature
    // columns are as large as X).
    template <class V> static inline void xk_give_back(V& v, int64_t n) {
        if ((int64_t) v.capacity() > 2 * n + 1024) {
            v.clear();
            v.shrink_to_fit();
        }
    }
    // v.resize(n) for scratch whose entries are all written afterwards,
    // after xk_give_back.
    template <class V> static inline void xk_resize(V& v, int64_t n) {
        xk_give_back(v, n);
        v.resize(n);
    }
    """
    # (except +: a failed allocation is caught where it is called and turned
    # into a Python error, as vector.resize's own calls are; see sparse_rows.pxd)
    void _give_back "xk_give_back" [V](V& v, int64_t n) except + nogil
    void _resize "xk_resize" [V](V& v, int64_t n) except + nogil


#: points above which a node's scratch is given back as soon as it is used:
#: reallocating it costs little beside the node's own work, and threads at
#: large nodes at once (the first trees' roots) then do not also hold it
cdef enum:
    LARGE_NODE = 1 << 15


cdef inline int64_t _gather(const int32_t* pts, int64_t n, const int64_t* ptr,
                            const int32_t* idx, vector[int32_t]& local, vector[int32_t]& act,
                            int32_t* buf, int64_t* lcount) except -1 nogil:
    """The distinct column indices of the rows of points pts[0:n] into `act`;
    local[i] := position of i in act (all other entries of `local` stay -1;
    _release resets them). `act` is ascending, or with `lcount` (not NULL)
    in order of first appearance (the separator's weights are put in index
    order at the end), and then lcount[local[i]] += the number of rows
    holding i.
    buf: scratch of len(local) + 1 entries (every entry is written to
    buf[len(act)], also once len(act) is len(local)). Returns len(act).

    (Without a branch on whether an index is new: which it is cannot be
    predicted, and the mispredictions were most of the pass's time.)"""
    cdef int64_t a, j, k, m = 0
    cdef int32_t p, i, l
    cdef bint new
    cdef int32_t* loc = local.data()
    for a in range(n):
        _fetch_ahead(pts, a, n, ptr, idx, NULL)
        p = pts[a]
        for j in range(ptr[p], ptr[p + 1]):
            i = idx[j]
            l = loc[i]
            new = l < 0
            buf[m] = i
            l = <int32_t> m if new else l
            loc[i] = l
            m += new
            if lcount != NULL:
                lcount[l] += 1
    act.assign(buf, buf + m)
    if lcount == NULL:
        if <int64_t> local.size() <= 16 * m:
            # (a scan of the marks in index order beats sorting when the
            # columns are few beside the distinct ones)
            k = 0
            for i in range(<int32_t> local.size()):
                if loc[i] >= 0:
                    act[k] = i
                    loc[i] = <int32_t> k
                    k += 1
        else:
            sort(act.begin(), act.end())
            for k in range(m):
                loc[act[k]] = <int32_t> k
    return m


cdef inline void _release(vector[int32_t]& local, vector[int32_t]& act) noexcept nogil:
    """Undo _gather's numbering: local[i] := -1 for the indices in act."""
    cdef int64_t k
    for k in range(<int64_t> act.size()):
        local[act[k]] = -1


cdef extern from *:
    """
    #include <mutex>
    #include <condition_variable>
    #include <vector>
    #include <cstdint>
    // The points of the large nodes being separated, held against a
    // budget: a node waits until its points fit beside those held (a node
    // alone always fits). The roots of a fit's trees hold the same points
    // in the same order, so their separators share one copy of their
    // columns (the `root_*` vectors, built by the first of them): the
    // roots separated at once hold one root's points.
    struct xk_slots {
        std::mutex m;
        std::condition_variable cv;
        long long budget = 1;
        long long held = 0;         // points held now
        long long most_held = 0;    // the most points ever held at once
        long count = 0;             // separators past the gate now
        long most_count = 0;        // the most ever past it at once
        int root_state = 0;         // 0: no root copy, 1: being built, 2: built
        long root_users = 0;        // separators using the root copy
        long root_shared = 0;       // separators that used a copy they did not build
        bool keep_root = false;     // (tests) the copy outlives its users
        std::vector<int64_t> root_ptr;
        std::vector<int32_t> root_pt;
        std::vector<float> root_val;
        void _in(long long w) {
            held += w;
            if (held > most_held) most_held = held;
            if (++count > most_count) most_count = count;
        }
        bool _fits(long long w) { return held == 0 || held + w <= budget; }
        void take(long long w) {
            std::unique_lock<std::mutex> lock(m);
            cv.wait(lock, [this, w] { return _fits(w); });
            _in(w);
        }
        void give(long long w) {
            { std::lock_guard<std::mutex> lock(m); held -= w; --count; }
            cv.notify_all();
        }
        // a root's separator: true when it builds the copy (then
        // root_built()), false when it shares the copy already built
        bool take_root(long long w) {
            std::unique_lock<std::mutex> lock(m);
            for (;;) {
                if (root_state == 2) { ++root_users; ++root_shared; _in(0); return false; }
                if (root_state == 0 && _fits(w)) {
                    root_state = 1;
                    root_users = 1;
                    _in(w);
                    return true;
                }
                cv.wait(lock);
            }
        }
        void root_built() {
            { std::lock_guard<std::mutex> lock(m); root_state = 2; }
            cv.notify_all();
        }
        // the last of the roots' separators gives the copy back
        void give_root(long long w) {
            std::vector<int64_t> ptr;
            std::vector<int32_t> pt;
            std::vector<float> val;
            {
                std::lock_guard<std::mutex> lock(m);
                --count;
                if (--root_users == 0 && !keep_root) {
                    root_state = 0;
                    held -= w;
                    ptr.swap(root_ptr);
                    pt.swap(root_pt);
                    val.swap(root_val);
                }
            }
            cv.notify_all();
        }
    };
    """
    cdef cppclass xk_slots:
        long long budget
        long long most_held
        long most_count
        long root_shared
        cbool keep_root
        vector[int64_t] root_ptr
        vector[int32_t] root_pt
        vector[float] root_val
        void take(long long w) noexcept nogil
        void give(long long w) noexcept nogil
        cbool take_root(long long w) noexcept nogil
        void root_built() noexcept nogil
        void give_root(long long w) noexcept nogil

