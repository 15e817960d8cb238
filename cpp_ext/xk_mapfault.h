/* A mapped file cut short under its mapping (truncated or replaced while a
 * process reads it) makes the system raise SIGBUS where the missing pages
 * are read. A command-line tool would end by that signal, with nothing on
 * stderr; xk_exit_on_map_fault() makes it end with exit code 2 and one
 * line instead: the prefix given, the folder last named by xk_mapped_folder
 * (the model whose files are mapped), and what happened.
 *
 * The handler does only what a signal handler may: write(2) of buffers
 * filled beforehand, then _exit. Windows refuses to truncate or replace a
 * file that is mapped, so there both are no-ops.
 */
#ifndef XK_MAPFAULT_H
#define XK_MAPFAULT_H

#include <string.h>

/* Copy n bytes of src (cut to cap) into a handler's buffer dst, its length
 * set to 0 during the copy, so that a handler never writes a half-copied
 * text. (Shared with xk_nomem.h.) */
static inline void xk_hold_text(char* dst, size_t cap, volatile size_t* dst_n,
                                const char* src, size_t n) {
    if (n > cap)
        n = cap;
    *dst_n = 0;
    memcpy(dst, src, n);
    *dst_n = n;
}

#if defined(_WIN32)
static inline void xk_exit_on_map_fault(const char* prefix, size_t n) {
    (void) prefix; (void) n;
}
static inline void xk_mapped_folder(const char* folder, size_t n) {
    (void) folder; (void) n;
}
#else
#  include <signal.h>
#  include <unistd.h>
static char xk_fault_prefix[512];
static volatile size_t xk_fault_prefix_n = 0;
static char xk_fault_folder[4096];
static volatile size_t xk_fault_folder_n = 0;
static const char xk_fault_what[] =
    "a file of the model was cut short while in use (truncated or replaced under its "
    "mapping): stopped; run again once its files are whole\n";

static void xk_fault_handler(int sig) {
    ssize_t r;
    size_t n = xk_fault_folder_n;
    (void) sig;
    r = write(2, xk_fault_prefix, xk_fault_prefix_n);
    if (n) {
        r = write(2, xk_fault_folder, n);
        r = write(2, ": ", 2);
    }
    r = write(2, xk_fault_what, sizeof xk_fault_what - 1);
    (void) r;
    _exit(2);
}

static inline void xk_mapped_folder(const char* folder, size_t n) {
    xk_hold_text(xk_fault_folder, sizeof xk_fault_folder, &xk_fault_folder_n, folder, n);
}

static inline void xk_exit_on_map_fault(const char* prefix, size_t n) {
    struct sigaction sa;
    xk_hold_text(xk_fault_prefix, sizeof xk_fault_prefix, &xk_fault_prefix_n, prefix, n);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = xk_fault_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}
#endif

#endif
