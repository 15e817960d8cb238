"""Compiled Cython extensions (built from cpp_ext/xmlkit/_ext/: see setup.py)."""
