"""Serving: request logs, traffic, latency curves, the batching simulator and the real batcher,
instances and server settings (``whyidle serving``, ``whyidle batching``; docs/batching.md).

:mod:`~whyidle.serving.requestlog` reads a request log, :mod:`~whyidle.serving.requests`
diagnoses it, :mod:`~whyidle.serving.batching` tunes the batching settings on
:mod:`~whyidle.serving.simulate`, :mod:`~whyidle.serving.report` renders both. The detector of
insufficient demand in a trace is the core's (``analyses/serving_loop.py``): it is a catalogue cause.
"""
