# The state of the builder of xmlkit._ext.fastxml_tree (code: fastxml_tree.pyx
# beside this file; Cython reads a module's own .pxd from the folder of its
# dotted name, xmlkit/_ext/, under an include directory: cpp_ext; see
# setup.py).
#
# A tree is grown by three objects, as scikit-learn's trees split Builder,
# Criterion and Splitter:
#   TreeGrower     the builder (here): points of each node, the node queue,
#                  leaves, the tree's arrays;
#   NdcgPartition  the criterion (fastxml_partition.pxd): splits a node's
#                  points in two by the FastXML nDCG alternation;
#   NodeSeparator  the splitter (fastxml_separator.pxd): fits the hyperplane
#                  that separates the two sides (SeparatorSolver,
#                  fastxml_solver.pxd, or liblinear) and routes the points
#                  by it.
# The growers of one fit (one per thread) share a LargeNodeGate, which lets
# them separate the largest nodes together only within a budget of points
# (memory), the roots on one shared copy of their columns, and a
# Crew, through which a grower without a tree of its own grows nodes of
# another's tree (a level's nodes are independent).

from libc.stdint cimport int32_t, int64_t, uint32_t
from libcpp cimport bool as cbool
from libcpp.vector cimport vector
from libcpp.utility cimport pair

from sparse_rows cimport mt19937
from xmlkit._ext.fastxml_common cimport xk_slots
from xmlkit._ext.fastxml_partition cimport NdcgPartition
from xmlkit._ext.fastxml_separator cimport NodeSeparator


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

    cdef void _grow(self, uint32_t seed) except * nogil
    cdef int _add_node(self, int64_t s, int64_t e, int32_t d) except -1 nogil
    cdef int _run_level(self) except -1 nogil
    cdef int _commit_level(self) except -1 nogil
    cdef int _task(self, const xk_board* b, int64_t i, vector[int32_t]& wi,
                   vector[float]& wv, vector[int32_t]& li, vector[float]& lv) except -1 nogil
    cdef int _slot_task(self, const xk_board* b, int64_t i) except -1 nogil
    cdef int _leaf(self, const int32_t* pts, int64_t n, vector[int32_t]& li,
                   vector[float]& lv) except -1 nogil
