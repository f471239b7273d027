"""Running per-rank work on a distributed engine (Dask). Optional extra ``dask``."""
