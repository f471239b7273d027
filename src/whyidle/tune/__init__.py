"""The optimisation loop: before/after comparison, lever sweeps, inference batching."""
