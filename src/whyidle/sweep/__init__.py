"""Lever sweeps (``whyidle sweep``): trials of a workload under the levers' settings, measured in
their own processes, searched and guarded, with their report.

:mod:`~whyidle.sweep.trial` (the settings and the result), :mod:`~whyidle.sweep.runner` and
:mod:`~whyidle.sweep.child` (a trial's process; :mod:`~whyidle.sweep.measure` inside it),
:mod:`~whyidle.sweep.search` and :mod:`~whyidle.sweep.guard`, :mod:`~whyidle.sweep.cache`,
:mod:`~whyidle.sweep.fakes` (for tests), :mod:`~whyidle.sweep.examples` (workloads to try),
:mod:`~whyidle.sweep.report` (terminal, JSON, HTML).
"""
