"""Binds the C library of liblinear-official to the Cython tree grower.

The Cython code calls liblinear's `train` directly (no Python per node), so the
struct layout it was compiled with is checked once against the ctypes
declarations of the installed liblinear binding.
"""
import ctypes

from xmlkit.errors import XmlkitError

_BOUND = False


def bind():
    global _BOUND
    if _BOUND:
        return
    from xmlkit._ext import fastxml_separator
    try:
        from liblinear import liblinear as llmod
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise XmlkitError(f"liblinear-official is not installed ({exc})") from None
    ours = fastxml_separator.struct_layout()
    for cname, pyname in (("parameter", "parameter"), ("model", "model"),
                          ("problem", "problem"), ("feature_node", "feature_node")):
        struct = getattr(llmod, pyname)
        size, offsets = ours[cname]
        bad = ctypes.sizeof(struct) != size or any(
            getattr(struct, f).offset != off for f, off in offsets.items())
        if bad:
            raise XmlkitError(f"the installed liblinear has an unexpected '{cname}' layout; "
                              "install liblinear-official 2.44 or newer")
    lib = llmod.liblinear

    def addr(fn):
        return ctypes.cast(fn, ctypes.c_void_p).value
    fastxml_separator.bind_liblinear(addr(lib.train), addr(lib.free_model_content),
                                     addr(lib.set_print_string_function))
    _BOUND = True
