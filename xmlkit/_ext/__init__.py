"""Compiled Cython extensions (built from cpp_ext/)."""
