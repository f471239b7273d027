"""Before and after: two runs compared (traces, saved reports or diagnoses), predictions checked.

:mod:`~whyidle.comparison.analysis` (``compare``, ``compare_reports``, ``Comparison``) and its
text and JSON (:mod:`~whyidle.comparison.render`). The package is not named ``compare``:
``whyidle.compare`` is the public function, which a subpackage of that name would replace.
"""
