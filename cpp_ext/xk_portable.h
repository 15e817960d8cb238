/* What the kernels ask of the compiler beyond standard C++17, one spelling
 * per compiler: GCC and Clang (Linux, macOS, MinGW) and MSVC (Windows).
 *
 * XK_ALWAYS_INLINE  a function inlined even where the compiler would not
 *                   (GCC drops a call whose only effect is a prefetch before
 *                   it would inline it)
 * XK_PREFETCH(p)    ask the cache for the line of address p (a hint: a
 *                   no-op where the compiler has none)
 * xk_flag_get/set   a byte flag that several threads read and one sets, once,
 *                   to 1 (acquire / release)
 * xk_heap_trim()    give the heap's free pages back to the system (glibc's
 *                   malloc_trim: free()d small blocks otherwise stay in the
 *                   process's memory; elsewhere a no-op)
 */
#ifndef XK_PORTABLE_H
#define XK_PORTABLE_H

#if defined(_MSC_VER) && !defined(__clang__)
#  include <atomic>
#  define XK_ALWAYS_INLINE __forceinline
#  if defined(_M_X64) || defined(_M_IX86)
#    include <xmmintrin.h>
#    define XK_PREFETCH(p) _mm_prefetch((const char*) (p), _MM_HINT_T0)
#  else
#    define XK_PREFETCH(p) ((void) 0)
#  endif
/* (an atomic<unsigned char> has the size and alignment of the byte it
   stands for, and is lock-free, on every target MSVC has) */
static inline unsigned char xk_flag_get(const unsigned char* p) {
    return reinterpret_cast<const std::atomic<unsigned char>*>(p)->load(
        std::memory_order_acquire);
}
static inline void xk_flag_set(unsigned char* p) {
    reinterpret_cast<std::atomic<unsigned char>*>(p)->store(1, std::memory_order_release);
}
#else
#  define XK_ALWAYS_INLINE inline __attribute__((always_inline))
#  define XK_PREFETCH(p) __builtin_prefetch(p)
static inline unsigned char xk_flag_get(const unsigned char* p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void xk_flag_set(unsigned char* p) {
    __atomic_store_n(p, 1, __ATOMIC_RELEASE);
}
#endif

#if defined(__GLIBC__)
#  include <malloc.h>
static inline void xk_heap_trim(void) { malloc_trim(0); }
#else
static inline void xk_heap_trim(void) {}
#endif

#endif
