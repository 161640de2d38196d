"""Benchmarks (run from the repository root: python bench/run.py); see bench/README.md."""
