"""Command-line tools: thin click layers over the Python API.

Only these modules print results (stdout); progress and logs go to stderr.
"""
