"""The optimisation loop: before/after comparison (``compare``), lever sweeps, inference batching.

Its results are shown by its own report modules (``sweep_report``, ``batching_report``): they
render tune's results, and ``render/`` imports nothing above the findings.
"""
