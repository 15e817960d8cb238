/* Memory the system refuses inside a kernel. A C++ allocation that fails
 * throws std::bad_alloc, which Cython turns into a MemoryError where the
 * kernel function lets exceptions out; where it does not (functions that
 * cannot raise, deep in the hot loops), the error is printed as "ignored"
 * and the work goes on with a container left short. A command-line tool
 * must not end so: xk_exit_on_no_memory() installs a new-handler that
 * writes one line filled beforehand (the command's out-of-memory message)
 * and ends the process with exit code 2, at the first allocation refused.
 * Temporary files left by the stop are removed by the next run, as after
 * any killed run (xmlkit.atomic). The library alone installs nothing.
 *
 * The handler does only write(2) and _exit: it must not allocate.
 */
#ifndef XK_NOMEM_H
#define XK_NOMEM_H

#include <new>
#include <string.h>
#include "xk_mapfault.h"
#if defined(_WIN32)
#  include <io.h>
#  include <stdlib.h>
#  define XK_WRITE _write
#else
#  include <unistd.h>
#  define XK_WRITE write
#endif

static char xk_nomem_line[2048];
static volatile size_t xk_nomem_n = 0;

static void xk_nomem_handler() {
    int r = (int) XK_WRITE(2, xk_nomem_line, (unsigned) xk_nomem_n);
    (void) r;
    _exit(2);
}

/* line: the whole message, its newline included (cut to 2048 bytes). */
static inline void xk_exit_on_no_memory(const char* line, size_t n) {
    xk_hold_text(xk_nomem_line, sizeof xk_nomem_line, &xk_nomem_n, line, n);
    std::set_new_handler(xk_nomem_handler);
}

#endif
