# The state of the kernels of xmlkit._ext.fastxml_tree, whose code is fastxml_tree.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).
#
# A tree is grown by three objects, as scikit-learn's trees split Builder,
# Criterion and Splitter:
#   TreeGrower     the builder: points of each node, the node queue, leaves,
#                  the tree's arrays;
#   NdcgPartition  the criterion: splits a node's points in two by the
#                  FastXML nDCG alternation;
#   NodeSeparator  the splitter: fits the hyperplane that separates the two
#                  sides (SeparatorSolver, or liblinear) and routes the
#                  points by it.
# The growers of one fit (one per thread) share a LargeNodeGate, which lets
# them separate the largest nodes together only within a budget of points
# (memory), the roots on one shared copy of their columns, and a
# Crew, through which a grower without a tree of its own grows nodes of
# another's tree (a level's nodes are independent).

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.vector cimport vector
from libcpp.utility cimport pair

from sparse_rows cimport mt19937


# ---- liblinear's C ABI (linear.h of liblinear >= 2.44) -------------------

cdef struct ll_node:
    int index
    double value

cdef struct ll_problem:
    int l
    int n
    double* y
    ll_node** x
    double bias

cdef struct ll_parameter:
    int solver_type
    double eps
    double C
    int nr_weight
    int* weight_label
    double* weight
    double p
    double nu
    double* init_sol
    int regularize_bias
    cbool w_recalc

cdef struct ll_model:
    ll_parameter param
    int nr_class
    int nr_feature
    double* w
    int* label
    double bias
    double rho


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


cdef struct xk_col:
    # fill's state of one column: where its next entry goes, the sums of
    # its loss gradient and Hessian diagonal at w = 0 (one cache line holds
    # two columns: the pass over the points touches one line per entry)
    int64_t pos
    double g
    double h
    double pad


cdef class SeparatorSolver:
    # -- the problem
    cdef int64_t n                        # number of points
    cdef int64_t nf                       # number of columns (features)
    cdef vector[int64_t] col_ptr          # column j: entries col_ptr[j]..col_ptr[j+1]-1
    cdef vector[int32_t] col_pt           # point (0..n-1) of each entry, ascending per column
    cdef vector[float] col_val            # value of each entry
    cdef const int64_t* cptr              # the columns solved: col_ptr, col_pt, col_val's
    cdef const int32_t* cpt               # data, or a root's shared copy (borrow)
    cdef const float* cval
    cdef vector[signed char] y            # label of each point, +1 or -1
    cdef vector[double] cw                # cost C_a of each point's loss
    # -- stopping rules
    cdef int max_newton                   # Newton iterations at most
    cdef int max_newton_small             # ... on problems of fewer than small_node points
    cdef int64_t small_node               # (0: every problem takes max_newton at most)
    cdef int max_inner                    # coordinate-descent passes per Newton step at most
    cdef int max_halvings                 # line-search halvings at most
    cdef double eps                       # relative tolerance on the subgradient's L1 norm
    cdef bint warm                        # start from the scaled proximal-gradient step
                                          # (else from w = 0, as the C++ tool)
    # -- solution and per-point state
    cdef vector[double] w                 # weights (the solution after solve())
    cdef vector[double] u                 # margins w.x_a
    cdef vector[double] r                 # dLoss/du_a at w
    cdef vector[double] D                 # d2Loss/du_a2 at w (the Hessian's point weights)
    cdef vector[double] lossv             # loss term of each point at w
    cdef vector[double] tq                # line-search trial: sigmoid per point
    cdef vector[double] tsp               # line-search trial: softplus per point
    # -- work space of one Newton step
    cdef vector[double] wpd               # w + d, the trial point
    cdef vector[double] xTd               # d.x_a for each point
    cdef vector[double] grad              # gradient of the loss at w
    cdef vector[double] grad0             # gradient of the loss at w = 0 (filled by fill)
    cdef vector[double] hdiag0            # Hessian diagonal of the loss at w = 0 (filled by fill)
    cdef vector[xk_col] acc               # fill's per-column positions and sums
    cdef vector[double] hdiag             # Hessian diagonal (+ nu) at w
    cdef vector[int32_t] index            # columns: [0, active) outer-active, [0, qp) inner-active
    cdef public int last_newton           # Newton iterations of the last solve
    cdef public int last_inner            # coordinate-descent passes of the last solve
    cdef public int64_t visits            # entries of the problem visited (gradient,
                                          # Hessian, coordinate passes), summed over solves
    cdef public int64_t newtons           # Newton iterations, summed over solves
    cdef public int64_t solves            # solves since the counters were zeroed

    cdef void borrow(self, xk_slots* root, int64_t n, const signed char* sign, double cpos,
                     double cneg) noexcept nogil
    cdef void lend(self, xk_slots* root) noexcept nogil
    cdef void _labels(self, int64_t n, int64_t ncol, const signed char* sign, double cpos,
                      double cneg) noexcept nogil
    cdef void let_go(self) noexcept nogil
    cdef void fill(self, const int32_t* pts, int64_t n, const int64_t* xp, const int32_t* xi,
                   const float* xv, const int32_t* fmap, int64_t* lcount, int64_t nf,
                   double bias, bint with_bias, const signed char* sign,
                   double cpos, double cneg) noexcept nogil
    cdef void _point_terms(self, bint trial) noexcept nogil
    cdef double _warm_start(self) noexcept nogil
    cdef int solve(self, mt19937& rng) noexcept nogil


cdef class NdcgPartition:
    cdef int64_t n_labels                 # label columns
    cdef bint use_idcg                    # normalise each point's DCG by its ideal DCG
    cdef vector[double] disc              # disc[r] = 1 / log2(r + 2): discount of rank r
    cdef vector[double] cs                # cs[c] = ideal DCG of a point with c labels (1 without idcg)
    cdef vector[int32_t] lmap             # label -> local index in the node, else -1
    cdef vector[int32_t] act_l            # the node's labels (local index -> label)
    cdef vector[int32_t] gbuf             # scratch of _gather: one entry per label, and one more
    cdef vector[int64_t] ly_ptr           # local labels of point a: ly_ptr[a] .. ly_ptr[a + 1] - 1
    cdef vector[int32_t] ly_idx           # local label of each entry
    cdef vector[float] ly_val             # value of each entry
    cdef vector[double] inorm             # 1 / ideal DCG of each point
    cdef vector[double] sp, sn            # per local label: normalised sums on the + / - side
    cdef vector[double] spo, sno          # the sums of the step before (their order is op / on)
    cdef vector[double] gain              # per local label: disc(rank +) - disc(rank -)
    cdef vector[int32_t] rp, rn           # rank of each local label on the + / - side
    cdef vector[int32_t] op, on           # local labels in rank order on the + / - side
    cdef vector[pair[double, int32_t]] order   # scratch: (key, label) pairs being ranked
    cdef vector[uint64_t] keys            # scratch: packed (float32 key, label) sort keys
    cdef vector[uint64_t] keys_tmp        # scratch: the radix sort's second buffer
    cdef vector[int32_t] merged           # scratch: the order being merged

    cdef void reset(self, int64_t n_labels)
    cdef int64_t partition(self, const int32_t* pts, int64_t n, const int64_t* yp,
                           const int32_t* yi, const float* yv, vector[signed char]& sign,
                           mt19937& rng) noexcept nogil
    cdef void _rank(self, vector[double]& s, const double* so, vector[int32_t]& r,
                    vector[int32_t]& order, int64_t m) noexcept nogil
    cdef bint _merge_changed(self, const double* sv, const double* so, vector[int32_t]& order,
                             int64_t m) noexcept nogil
    cdef void _sort_all(self, const double* sv, vector[int32_t]& order, int64_t m) noexcept nogil


cdef class NodeSeparator:
    cdef const int64_t[::1] xp            # the training features (CSR, without the bias)
    cdef const int32_t[::1] xi
    cdef const float[::1] xv
    cdef int64_t n_features               # feature columns (the bias feature is n_features)
    cdef double bias                      # value of the bias feature
    cdef double xmax                      # the largest |value| in X
    cdef double cost                      # cost of the loss against the L1 term
    cdef double eps                       # the solvers' relative stopping tolerance
    cdef bint use_liblinear               # separators by liblinear (else by `solver`)
    cdef SeparatorSolver solver           # xmlkit's separator solver and its node problem
    cdef vector[int32_t] fmap             # feature -> local column in the node, else -1
    cdef vector[int32_t] act_f            # the node's features (local column -> feature)
    cdef vector[int32_t] gbuf             # scratch of _gather: one entry per feature (+ bias), and one more
    cdef vector[int64_t] lcount           # per local column: the node's entries (for fill;
                                          # zero between nodes)
    cdef vector[double] wvec              # the node's weights by local column, bias last
    cdef vector[pair[int32_t, float]] wsel     # scratch: the non-zero weights by feature
    cdef vector[ll_node] xbuf             # liblinear: the node's rows
    cdef vector[ll_node*] xrows           # liblinear: start of each row in xbuf
    cdef vector[double] yvec              # liblinear: label of each point

    cdef void reset(self, const int64_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
                    int64_t n_features)
    cdef bint split(self, const int32_t* pts, int64_t n, int64_t n_pos,
                    vector[signed char]& sign, mt19937& rng, vector[int32_t]& w_idx,
                    vector[float]& w_val, xk_slots* root=*) noexcept nogil
    cdef void _fit(self, const int32_t* pts, int64_t n, int64_t nf, int64_t n_pos,
                   vector[signed char]& sign, mt19937& rng, xk_slots* root) noexcept nogil
    cdef void _fit_liblinear(self, const int32_t* pts, int64_t n, int64_t nf, int64_t n_pos,
                             vector[signed char]& sign, mt19937& rng) noexcept nogil
    cdef bint _route(self, const int32_t* pts, int64_t n, int64_t nf, const double* u,
                     vector[signed char]& sign, vector[int32_t]& w_idx,
                     vector[float]& w_val) noexcept nogil


cdef class LargeNodeGate:
    cdef xk_slots slots                   # points of the large nodes being separated; the
                                          # roots' shared columns
    cdef public int64_t min_points        # a node of more than this many points is large
    cdef int64_t n_points                 # training points (a node of all of them is a root)


cdef extern from *:
    """
    #include <mutex>
    #include <condition_variable>
    #include <vector>
    // Levels of trees open to helpers. An owner publishes a level of n
    // nodes, claims its nodes itself and waits until every claimed node is
    // done; helpers claim nodes of any published level and wait for one
    // while some tree is still growing.
    struct xk_crew {
        struct level { void* board; long next; long n; long left; };
        std::mutex m;
        std::condition_variable cv;
        std::vector<level> levels;
        long trees_left = 0;    // trees whose owners have not finished them
        bool stopped = false;
        long helped = 0;        // nodes grown by helpers
        long waiting = 0;       // helpers waiting for nodes
        level* find(void* b) {
            for (auto& x : levels) if (x.board == b) return &x;
            return nullptr;
        }
        void expect(long n) {
            std::lock_guard<std::mutex> lock(m);
            trees_left = n;
            stopped = false;
        }
        void tree_done() {
            { std::lock_guard<std::mutex> lock(m); --trees_left; }
            cv.notify_all();
        }
        void stop() {
            { std::lock_guard<std::mutex> lock(m); stopped = true; }
            cv.notify_all();
        }
        // whether a helper waits for nodes (then an owner opens its level)
        bool wanted() {
            std::lock_guard<std::mutex> lock(m);
            return waiting > 0;
        }
        // nodes first .. n - 1 of level b open
        void publish(void* b, long first, long n) {
            {
                std::lock_guard<std::mutex> lock(m);
                levels.push_back(level{b, first, n, n - first});
            }
            cv.notify_all();
        }
        long claim_own(void* b) {
            std::lock_guard<std::mutex> lock(m);
            level* x = find(b);
            return x->next < x->n ? x->next++ : -1;
        }
        bool claim(void** b, long* i) {
            std::unique_lock<std::mutex> lock(m);
            for (;;) {
                if (stopped) return false;
                for (auto& x : levels) {
                    if (x.next < x.n) {
                        *b = x.board;
                        *i = x.next++;
                        ++helped;
                        return true;
                    }
                }
                if (trees_left <= 0) return false;
                ++waiting;
                cv.wait(lock);
                --waiting;
            }
        }
        void done(void* b) {
            bool last;
            {
                std::lock_guard<std::mutex> lock(m);
                last = --find(b)->left == 0;
            }
            if (last) cv.notify_all();
        }
        void finish(void* b) {
            std::unique_lock<std::mutex> lock(m);
            cv.wait(lock, [&] { return find(b)->left == 0; });
            for (size_t k = 0; k < levels.size(); ++k) {
                if (levels[k].board == b) { levels.erase(levels.begin() + k); break; }
            }
        }
    };
    """
    cdef cppclass xk_crew:
        long helped
        void expect(long n) noexcept nogil
        void tree_done() noexcept nogil
        void stop() noexcept nogil
        cbool wanted() noexcept nogil
        void publish(void* b, long first, long n) noexcept nogil
        long claim_own(void* b) noexcept nogil
        cbool claim(void** b, long* i) noexcept nogil
        void done(void* b) noexcept nogil
        void finish(void* b) noexcept nogil


cdef class Crew:
    cdef xk_crew c                        # the open levels and the trees still growing


# One level of a tree being grown: what a grower needs to grow any of its
# nodes (TreeGrower._task), and where the node's results go.
cdef struct xk_board:
    int64_t first                         # the level's first node
    int64_t n_nodes                       # its nodes: first .. first + n_nodes - 1
    int64_t gen                           # the owner's levels so far, over all its trees
                                          # (with the board's address, names the level)
    int64_t base                          # random numbers drawn before the level
    mt19937* rng_base                     # the tree's generator after those draws
    int32_t* pts                          # the owner's point ids
    signed char* side                     # out: per point position, side of a split node's point
    const int64_t* start                  # the owner's node ranges
    const int64_t* stop
    const int64_t* off                    # per level node: random numbers drawn before it
    int64_t* draws                        # out: random numbers the node drew
    char* split                           # out: whether the node was split (else a leaf)
    bint shared                           # grown by the crew: results in the tables below
    vector[vector[int32_t]]* wi           # out: per level node, a split's weights (features)
    vector[vector[float]]* wv             #      and values,
    vector[vector[int32_t]]* li           #      a leaf's labels
    vector[vector[float]]* lv             #      and values


cdef class TreeGrower:
    cdef const int64_t[::1] yp            # the training labels (CSR; values as given)
    cdef const int32_t[::1] yi
    cdef const float[::1] yv
    cdef int64_t n_points                 # training points
    cdef int64_t n_labels                 # label columns
    cdef int max_leaf                     # a node of at most this many points is a leaf
    cdef int labels_per_leaf              # labels kept per leaf
    cdef NdcgPartition criterion          # splits a node's points in two
    cdef NodeSeparator separator          # separates the two sides by a hyperplane
    cdef LargeNodeGate gate               # shared by the growers of one fit, or None
    cdef Crew crew                        # shared by the growers of one fit, or None
    cdef bint plan_splits                 # plan levels as if every node were split (tests: False)
    # the tree being grown
    cdef vector[int32_t] child            # children of node i: child[2i], child[2i + 1]; -1 -1 at leaves
    cdef vector[int32_t] depth            # depth of each node
    cdef vector[int64_t] start, stop      # points of node i: pts[start[i]] .. pts[stop[i] - 1]
    cdef vector[int64_t] w_ptr, l_ptr     # weights / leaf labels of node i: [ptr[i], ptr[i + 1])
    cdef vector[int32_t] w_idx, l_idx     # feature of each weight / label of each leaf entry
    cdef vector[float] w_val, l_val       # their values
    # work space
    cdef vector[int32_t] pts              # point ids, each node's contiguous
    cdef vector[int32_t] tmp_pts          # scratch: the negative side; a leaf's labels
    cdef vector[signed char] sign         # side (+1 / -1) of each point of the node
    cdef vector[double] acc               # per label: a leaf's sums
    cdef vector[char] seen                # per label: counted in the current leaf
    cdef vector[int32_t] act_l            # the current leaf's labels
    cdef vector[pair[double, int32_t]] order   # scratch: (-mean, label) of a leaf
    # the current level of the tree being grown (see xk_board)
    cdef xk_board board
    cdef mt19937 rng_base                 # the tree's generator at the level's start
    cdef vector[int64_t] lv_off           # per level node: random numbers drawn before it
    cdef vector[int64_t] lv_draws         # per level node: random numbers it drew
    cdef vector[int64_t] lv_plan          # per level node: what it was planned to draw (crew)
    cdef vector[char] lv_split            # per level node: split (else a leaf)
    cdef vector[int64_t] lv_wend, lv_lend # per level node grown alone: end of its weights /
                                          # leaf labels in the tree's arrays
    cdef vector[signed char] side         # per point position: side of a split node's point
    cdef vector[vector[int32_t]] lv_wi, lv_li  # per level node grown by the crew: weights
    cdef vector[vector[float]] lv_wv, lv_lv    # (feature, value), leaf labels (label, value)
    # the generator of the node being grown (any tree's, as a helper)
    cdef mt19937 rng
    cdef const xk_board* rng_board        # level the generator is positioned in
    cdef int64_t rng_gen
    cdef int64_t rng_pos                  # random numbers drawn from the tree's stream

    cdef void _grow(self, uint32_t seed) except + nogil
    cdef void _add_node(self, int64_t s, int64_t e, int32_t d) noexcept nogil
    cdef void _run_level(self) noexcept nogil
    cdef void _commit_level(self) noexcept nogil
    cdef void _task(self, const xk_board* b, int64_t i, vector[int32_t]& wi,
                    vector[float]& wv, vector[int32_t]& li, vector[float]& lv) noexcept nogil
    cdef void _slot_task(self, const xk_board* b, int64_t i) noexcept nogil
    cdef void _leaf(self, const int32_t* pts, int64_t n, vector[int32_t]& li,
                    vector[float]& lv) noexcept nogil
