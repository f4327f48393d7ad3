"""Reproducible benchmarks of the raycep engine (not timed tests; see RESULTS.md)."""
