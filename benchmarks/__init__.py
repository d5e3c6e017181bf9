"""Benchmarks: a model zoo and a harness comparing backends side by side.

Run ``python -m benchmarks.run --help``; ``benchmarks/README.md`` says how to
read the tables. Benchmarks are not tests: they print tables and write JSON.
"""
