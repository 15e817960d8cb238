# Parser and writer for the Extreme Classification (XC) text formats.
#
# The Python module xmlkit.io owns files, headers, compression and error
# messages; this module only turns complete text lines into CSR arrays (and
# CSR rows back into text), without the GIL.
#
# Rows are fed in chunks of whole lines, so a file is never held in memory
# at once: memory is the CSR arrays plus one chunk.

from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memchr
from libc.stdio cimport snprintf
from cpython.ref cimport PyObject, Py_DECREF

cdef extern from "Python.h":
    # (raw references: the text is written into a bytes object, then cut)
    PyObject* _new_bytes "PyBytes_FromStringAndSize" (const char* s, Py_ssize_t n)
    char* _bytes_data "PyBytes_AS_STRING" (PyObject* b)
    int _PyBytes_Resize(PyObject** b, Py_ssize_t n)
from libc.math cimport pow, isfinite, fabs, nearbyint, signbit
from libcpp.vector cimport vector
from libcpp.utility cimport pair

import numpy as np
cimport numpy as cnp

from sparse_rows cimport array_copy, indptr_t, sort

cnp.import_array()

# Error codes, translated into messages by xmlkit.io.
cdef enum:
    E_OK = 0
    E_FEATURE_TOKEN = 1
    E_LABEL_TOKEN = 2
    E_NEGATIVE = 3
    E_FEATURE_RANGE = 4
    E_LABEL_RANGE = 5
    E_VALUE = 6
    E_NONFINITE = 7
    E_FEATURE_DUP = 8
    E_LABEL_DUP = 9
    E_EXTRA_ROWS = 10
    E_ZERO_INDEX = 11
    E_LABELS_MISSING = 12

ERROR_NAMES = {
    E_FEATURE_TOKEN: "feature_token",
    E_LABEL_TOKEN: "label_token",
    E_NEGATIVE: "negative",
    E_FEATURE_RANGE: "feature_range",
    E_LABEL_RANGE: "label_range",
    E_VALUE: "value",
    E_NONFINITE: "nonfinite",
    E_FEATURE_DUP: "feature_dup",
    E_LABEL_DUP: "label_dup",
    E_EXTRA_ROWS: "extra_rows",
    E_ZERO_INDEX: "zero_index",
    E_LABELS_MISSING: "labels_missing",
}

cdef double[23] POW10
cdef int _i
for _i in range(23):
    POW10[_i] = 10.0 ** _i

cdef uint64_t MANT_LIMIT = 100000000000000000ULL   # 1e17: room for one more digit
cdef uint64_t EXACT_LIMIT = 9007199254740992ULL    # 2^53
cdef int64_t INDEX_SATURATE = 1LL << 40


cdef inline bint is_space(unsigned char c) noexcept nogil:
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


cdef inline bint is_digit(unsigned char c) noexcept nogil:
    return c >= 48 and c <= 57


cdef inline const unsigned char* parse_index(const unsigned char* p,
                                             const unsigned char* end,
                                             int64_t* out) noexcept nogil:
    """Unsigned decimal integer; NULL if there is no digit. Saturates."""
    cdef const unsigned char* start = p
    cdef int64_t v = 0
    while p < end and is_digit(p[0]):
        if v < INDEX_SATURATE:
            v = v * 10 + (p[0] - 48)
        p += 1
    if p == start:
        return NULL
    out[0] = v
    return p


cdef inline const unsigned char* parse_value(const unsigned char* p,
                                             const unsigned char* end,
                                             double* out) noexcept nogil:
    """Decimal floating point number ([+-]d[.d][e[+-]d]); NULL if malformed.

    Mantissas up to 17 digits with |exponent| <= 22 convert exactly rounded;
    longer ones are accurate far beyond float32, which is what we store.
    """
    cdef bint neg = False
    cdef bint any_digit = False
    cdef uint64_t mant = 0
    cdef int64_t exp10 = 0
    cdef int64_t e = 0
    cdef bint eneg = False
    cdef double v
    if p < end and (p[0] == 45 or p[0] == 43):   # '-' '+'
        neg = p[0] == 45
        p += 1
    while p < end and is_digit(p[0]):
        any_digit = True
        if mant < MANT_LIMIT:
            mant = mant * 10 + (p[0] - 48)
        else:
            exp10 += 1
        p += 1
    if p < end and p[0] == 46:                    # '.'
        p += 1
        while p < end and is_digit(p[0]):
            any_digit = True
            if mant < MANT_LIMIT:
                mant = mant * 10 + (p[0] - 48)
                exp10 -= 1
            p += 1
    if not any_digit:
        return NULL
    if p < end and (p[0] == 101 or p[0] == 69):   # 'e' 'E'
        p += 1
        if p < end and (p[0] == 45 or p[0] == 43):
            eneg = p[0] == 45
            p += 1
        if p >= end or not is_digit(p[0]):
            return NULL
        while p < end and is_digit(p[0]):
            if e < 100000:
                e = e * 10 + (p[0] - 48)
            p += 1
        exp10 += -e if eneg else e
    if mant == 0:
        v = 0.0
    elif mant < EXACT_LIMIT and exp10 >= 0 and exp10 <= 22:
        v = <double> mant * POW10[exp10]
    elif mant < EXACT_LIMIT and exp10 < 0 and exp10 >= -22:
        v = <double> mant / POW10[-exp10]
    elif exp10 < -300:
        v = (<double> mant * pow(10.0, <double> (exp10 + 300))) * 1e-300
    else:
        v = <double> mant * pow(10.0, <double> exp10)
    out[0] = -v if neg else v
    return p


cdef inline const unsigned char* token_end(const unsigned char* p,
                                           const unsigned char* end) noexcept nogil:
    while p < end and not is_space(p[0]):
        p += 1
    return p


cdef class RowParser:
    """Accumulates rows of a sparse matrix (and, for the single-file format,
    of the label matrix) from chunks of complete text lines. Members: see
    xcparse.pxd."""

    def __init__(self, int64_t n_rows, int64_t n_cols, int64_t n_labels=-1,
                 int index_base=0, int64_t first_line=2):
        if n_cols >= 2147483647 or n_labels >= 2147483647:
            raise ValueError("dimension too large for 32-bit indices")
        self.with_labels = n_labels >= 0
        self.n_rows = n_rows
        self.n_cols = n_cols
        self.n_labels = n_labels
        self.index_base = index_base
        self.rows_done = 0
        self.line_no = first_line
        self.x_indptr.push_back(0)
        self.y_indptr.push_back(0)
        self.err = E_OK

    def feed(self, const unsigned char[::1] buf, bint final):
        """Parse the complete lines of buf (and the last partial one when
        final). Returns the number of bytes consumed; stops at the first
        error (see error_info)."""
        cdef const unsigned char* start
        cdef int64_t n = buf.shape[0]
        cdef int64_t used
        if n == 0:
            return 0
        start = &buf[0]
        with nogil:
            used = self._feed(start, start + n, final)
        return used

    cdef int64_t _feed(self, const unsigned char* start, const unsigned char* end,
                       bint final) except * nogil:
        cdef const unsigned char* p = start
        cdef const unsigned char* nl
        cdef const unsigned char* le
        cdef const unsigned char* q
        cdef int code
        while p < end:
            nl = <const unsigned char*> memchr(p, 10, end - p)
            if nl == NULL:
                if not final:
                    break
                le = end
            else:
                le = nl
            if self.rows_done >= self.n_rows:
                # blank lines after the N rows end the file; anything else is a row too many
                q = p
                while q < le and is_space(q[0]):
                    q += 1
                if q < le:
                    self._fail(E_EXTRA_ROWS, p, p, self.n_rows)
                    return p - start
                self.line_no += 1
                p = le + 1 if nl != NULL else le
                continue
            code = self._parse_line(p, le)
            if code != E_OK:
                return p - start
            self.rows_done += 1
            self.line_no += 1
            p = le + 1 if nl != NULL else le
        return p - start

    cdef inline int _fail(self, int code, const unsigned char* tok,
                          const unsigned char* tok_end_, int64_t value) noexcept nogil:
        self.err = code
        self.err_line = self.line_no
        self.err_tok_start = <int64_t> tok
        self.err_tok_stop = <int64_t> tok_end_
        self.err_value = value
        return code

    cdef int _parse_line(self, const unsigned char* p, const unsigned char* e) except -1 nogil:
        """One row (its line: p .. e): an error code (E_OK: none), or -1 with
        MemoryError raised when its entries cannot be stored."""
        cdef const unsigned char* q
        cdef const unsigned char* tok
        cdef int64_t idx
        cdef double v
        cdef float fv
        cdef int64_t prev = -1
        cdef bint ordered = True
        cdef int64_t row_start, j, k
        cdef int32_t lab

        if self.with_labels:
            row_start = self.y_ind.size()
            if p < e and not is_space(p[0]):
                tok = p
                while True:
                    if p < e and p[0] == 45:
                        return self._fail(E_NEGATIVE, tok, token_end(p, e), 0)
                    q = parse_index(p, e, &idx)
                    if q == NULL:
                        return self._fail(E_LABEL_TOKEN, tok, token_end(p, e), 0)
                    if q < e and q[0] == 58:      # ':' -> a feature, labels were left out
                        return self._fail(E_LABELS_MISSING, tok, token_end(q, e), 0)
                    idx -= self.index_base
                    if idx < 0:
                        return self._fail(E_ZERO_INDEX, tok, token_end(q, e), 0)
                    if idx >= self.n_labels:
                        return self._fail(E_LABEL_RANGE, tok, token_end(q, e),
                                          idx + self.index_base)
                    if idx <= prev:
                        ordered = False
                    prev = idx
                    self.y_ind.push_back(<int32_t> idx)
                    p = q
                    if p < e and p[0] == 44:      # ','
                        p += 1
                        continue
                    if p < e and not is_space(p[0]):
                        return self._fail(E_LABEL_TOKEN, tok, token_end(p, e), 0)
                    break
                if not ordered:
                    sort(self.y_ind.begin() + row_start, self.y_ind.end())
                    for j in range(row_start + 1, <int64_t> self.y_ind.size()):
                        if self.y_ind[j] == self.y_ind[j - 1]:
                            return self._fail(E_LABEL_DUP, tok, token_end(tok, e),
                                              self.y_ind[j] + self.index_base)
            self.y_indptr.push_back(self.y_ind.size())
            ordered = True
            prev = -1

        row_start = self.x_ind.size()
        while p < e and is_space(p[0]):
            p += 1
        while p < e:
            tok = p
            if p[0] == 45:
                return self._fail(E_NEGATIVE, tok, token_end(p, e), 0)
            q = parse_index(p, e, &idx)
            if q == NULL or q >= e or q[0] != 58:
                return self._fail(E_FEATURE_TOKEN, tok, token_end(p, e), 0)
            p = q + 1
            q = parse_value(p, e, &v)
            if q == NULL or (q < e and not is_space(q[0])):
                return self._fail(E_VALUE, tok, token_end(p, e), 0)
            fv = <float> v
            if not isfinite(fv):
                return self._fail(E_NONFINITE, tok, token_end(p, e), 0)
            idx -= self.index_base
            if idx < 0:
                return self._fail(E_ZERO_INDEX, tok, q, 0)
            if idx >= self.n_cols:
                return self._fail(E_FEATURE_RANGE, tok, q, idx + self.index_base)
            if idx == prev:
                return self._fail(E_FEATURE_DUP, tok, q, idx + self.index_base)
            if idx < prev:
                ordered = False
            prev = idx
            self.x_ind.push_back(<int32_t> idx)
            self.x_val.push_back(fv)
            p = q
            while p < e and is_space(p[0]):
                p += 1
        if not ordered:
            k = self.x_ind.size()
            self.tmp.clear()
            for j in range(row_start, k):
                self.tmp.push_back(pair[int32_t, float](self.x_ind[j], self.x_val[j]))
            sort(self.tmp.begin(), self.tmp.end())
            for j in range(row_start, k):
                self.x_ind[j] = self.tmp[j - row_start].first
                self.x_val[j] = self.tmp[j - row_start].second
                if j > row_start and self.x_ind[j] == self.x_ind[j - 1]:
                    return self._fail(E_FEATURE_DUP, p, p, self.x_ind[j] + self.index_base)
        self.x_indptr.push_back(self.x_ind.size())
        return E_OK

    def error_info(self, const unsigned char[::1] buf):
        """(code name, line, offending token as str, value) of the last error;
        buf is the buffer that was fed when it happened."""
        if self.err == E_OK:
            return None
        cdef int64_t base = <int64_t> &buf[0] if buf.shape[0] else 0
        cdef int64_t a = self.err_tok_start - base
        cdef int64_t b = self.err_tok_stop - base
        a = max(0, min(a, buf.shape[0]))
        b = max(a, min(b, buf.shape[0], a + 60))
        token = bytes(buf[a:b]).decode("utf-8", "replace")
        return ERROR_NAMES[self.err], self.err_line, token, self.err_value

    def restart(self):
        """After arrays(): collect the next rows from an empty state (row
        counts and line numbers go on), for reading a file in pieces."""
        self.x_ind.clear()
        self.x_val.clear()
        self.y_ind.clear()
        self.x_indptr.clear()
        self.y_indptr.clear()
        self.x_indptr.push_back(0)
        self.y_indptr.push_back(0)

    def arrays(self):
        """(indptr, indices, data) for the features, then (indptr, indices)
        for the labels (None without labels). Copies; frees the buffers."""
        x = (_take_indptr(self.x_indptr), _take_int32(self.x_ind), _take_float(self.x_val))
        y = None
        if self.with_labels:
            y = (_take_indptr(self.y_indptr), _take_int32(self.y_ind))
        return x, y


cdef object _take_int32(vector[int32_t]& v):
    out = array_copy(v.data(), v.size(), cnp.NPY_INT32)
    vector[int32_t]().swap(v)
    return out


cdef object _take_float(vector[float]& v):
    out = array_copy(v.data(), v.size(), cnp.NPY_FLOAT32)
    vector[float]().swap(v)
    return out


cdef object _take_indptr(vector[int64_t]& v):
    """int32 index pointers when they fit (what scipy would pick), else int64."""
    cdef int64_t n = v.size()
    cdef int64_t i
    cdef int32_t[::1] o32
    if v[n - 1] < 2147483647:
        out = np.empty(n, dtype=np.int32)
        o32 = out
        for i in range(n):
            o32[i] = <int32_t> v[i]
    else:
        out = array_copy(v.data(), n, cnp.NPY_INT64)
    vector[int64_t]().swap(v)
    return out


# ---------------------------------------------------------------- writing

cdef enum:
    # characters a formatted entry takes at most: a separator, an int32 with
    # its sign, a colon and a value, which takes at most its precision plus
    # VALUE_ROOM (%f of the largest float: a sign, 39 digits and a point)
    VALUE_ROOM = 48
    ENTRY_ROOM = 1 + 11 + 1 + VALUE_ROOM
    # the largest precision format_rows takes
    MAX_PRECISION = 100


cdef inline char* put_int(char* p, int64_t v) noexcept nogil:
    """Write v in decimal at p; returns the end."""
    cdef char[24] tmp
    cdef int n = 0
    cdef int i
    if v == 0:
        p[0] = 48
        return p + 1
    if v < 0:
        p[0] = 45
        p += 1
        v = -v
    while v > 0:
        tmp[n] = <char> (48 + v % 10)
        v = v // 10
        n += 1
    for i in range(n):
        p[i] = tmp[n - 1 - i]
    return p + n


cdef inline char* put_value(char* p, double v, const char* fmt, int prec) noexcept nogil:
    """Write v by snprintf's fmt (with precision prec, 0..MAX_PRECISION) at
    p, at most prec + VALUE_ROOM characters; returns the end."""
    cdef int n = snprintf(p, prec + VALUE_ROOM + 1, fmt, prec, v)
    return p + (n if n > 0 else 0)


cdef inline char* put_fixed(char* p, float v, int prec, double scale,
                            uint64_t unit) noexcept nogil:
    """%.{prec}f of a float, faster than snprintf and identical to it:
    |v|·10^prec is exact in a double (24-bit mantissa times 5^prec of at most
    21 bits, prec <= 9), so rounding it half-to-even (the default rounding
    mode, which glibc's printf also follows) gives printf's digits."""
    cdef double a = fabs(<double> v) * scale
    cdef uint64_t q, frac
    cdef int i
    if not isfinite(a) or a >= 9007199254740992.0:   # 2^53: leave it to printf
        return put_value(p, v, b"%.*f", prec)
    q = <uint64_t> nearbyint(a)
    if signbit(v):
        p[0] = 45
        p += 1
    p = put_int(p, <int64_t> (q // unit))
    if prec > 0:
        p[0] = 46
        frac = q % unit
        for i in range(prec, 0, -1):
            p[i] = <char> (48 + frac % 10)
            frac = frac // 10
        p += prec + 1
    return p


cdef char* _format_rows(const indptr_t* xp, const int32_t* xi, const float* xv,
                        const indptr_t* yp, const int32_t* yi,
                        int64_t r0, int64_t r1, const char* fmt, int prec, bint fixed,
                        char* p) noexcept nogil:
    """Write the text of rows r0..r1-1 at p (room for the bound that
    format_rows sets); returns the end."""
    cdef int64_t r, j
    cdef bint fast = fixed and 0 <= prec <= 9
    cdef double scale = pow(10.0, prec) if fast else 1.0
    cdef uint64_t unit = <uint64_t> scale
    for r in range(r0, r1):
        if yp != NULL:
            for j in range(yp[r], yp[r + 1]):
                if j > yp[r]:
                    p[0] = 44
                    p += 1
                p = put_int(p, yi[j])
            # Labels and features are separated by one space, so a point
            # without labels starts with a space (single-file format).
            if xp[r + 1] > xp[r]:
                p[0] = 32
                p += 1
        for j in range(xp[r], xp[r + 1]):
            if j > xp[r]:
                p[0] = 32
                p += 1
            p = put_int(p, xi[j])
            p[0] = 58
            p += 1
            if fast:
                p = put_fixed(p, xv[j], prec, scale, unit)
            else:
                p = put_value(p, xv[j], fmt, prec)
        p[0] = 10
        p += 1
    return p


def format_rows(const indptr_t[::1] x_indptr, const int32_t[::1] x_indices,
                const float[::1] x_data, y_indptr, y_indices,
                int64_t r0, int64_t r1, bint fixed, int precision):
    """Text of rows r0..r1-1: `idx:val` pairs joined by single spaces, one
    line per row; with y arrays, the single-file format (`l1,l2 idx:val`).
    Values use %.{precision}f when fixed, else %.{precision}g. The text is
    written in place into a bytes object sized for the longest it can be
    (pages never written are never taken), then cut to its length."""
    cdef const indptr_t[::1] yp
    cdef const int32_t[::1] yi
    cdef const indptr_t* yp_ptr = NULL
    cdef const int32_t* yi_ptr = NULL
    cdef const char* fmt = b"%.*f" if fixed else b"%.*g"
    cdef int32_t dummy_i = 0
    cdef float dummy_f = 0
    cdef int64_t bound
    cdef char* start
    cdef char* end
    cdef PyObject* raw
    if not 0 <= precision <= MAX_PRECISION:
        raise ValueError(f"a precision of 0 to {MAX_PRECISION} digits, not {precision}")
    if r1 <= r0:
        return b""
    bound = (r1 - r0) + (x_indptr[r1] - x_indptr[r0]) * (ENTRY_ROOM + precision)
    if y_indptr is not None:
        yp = np.ascontiguousarray(y_indptr, dtype=np.asarray(x_indptr).dtype)
        yi = np.ascontiguousarray(y_indices, dtype=np.int32)
        yp_ptr = &yp[0]
        yi_ptr = &yi[0] if yi.shape[0] else &dummy_i
        bound += (r1 - r0) + (yp[r1] - yp[r0]) * 12
    cdef const int32_t* xi_ptr = &x_indices[0] if x_indices.shape[0] else &dummy_i
    cdef const float* xv_ptr = &x_data[0] if x_data.shape[0] else &dummy_f
    raw = _new_bytes(NULL, bound)
    if raw == NULL:
        raise MemoryError()
    start = _bytes_data(raw)
    with nogil:
        end = _format_rows(&x_indptr[0], xi_ptr, xv_ptr, yp_ptr, yi_ptr, r0, r1, fmt,
                           precision, fixed, start)
    if _PyBytes_Resize(&raw, end - start) < 0:      # (raw is gone then)
        raise MemoryError()
    text = <object> raw
    Py_DECREF(text)                     # (the reference made with it)
    return text
