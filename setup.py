"""Build of the Cython extensions in cpp_ext/ into the xmlkit._ext package.

The kernels' sources lie in cpp_ext/xmlkit/_ext/, the folder of their
module names: cpp_ext/xmlkit/_ext/NAME.pyx is compiled as xmlkit._ext.NAME,
and a module with cdef classes declares their state in NAME.pxd beside it.
Cython finds a module's own .pxd by the module's dotted name under an
include directory (here cpp_ext), not by the .pyx's file name, so the
kernels sit in folders named as their package (no __init__ files are
needed there). cpp_ext/sparse_rows.pxd, shared by every kernel, is cimported
by its plain name.

Compiler directives are set here, once, for every extension.  Set
XMLKIT_DEBUG_CYTHON=1 to build with bounds checks (slow; for debugging).
"""
import os
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent
DEBUG = os.environ.get("XMLKIT_DEBUG_CYTHON", "0") == "1"

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": False,
    "initializedcheck": DEBUG,
    "nonecheck": False,
    "cdivision": True,
    "embedsignature": True,
}

extensions = [
    Extension(
        f"xmlkit._ext.{pyx.stem}",
        [str(pyx.relative_to(HERE))],
        include_dirs=[numpy.get_include(), "cpp_ext"],
        language="c++",
        extra_compile_args=["-O3", "-std=c++17"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    for pyx in sorted((HERE / "cpp_ext" / "xmlkit" / "_ext").glob("*.pyx"))
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives=DIRECTIVES,
        include_path=["cpp_ext"],
    ),
)
