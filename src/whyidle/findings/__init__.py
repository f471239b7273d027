"""The findings layer: the rules that turn analyses into ranked findings with evidence and fixes
(``rules``, ``nsys_rules``, ``counter_rules``, ...), the levers, the CI gate, and the diagnosis as
data (``model.DiagnosisData``: every gap, the device activity, the findings) with its JSON
codec (``codec``, ``codec_parts``: one field table per part, built with ``fields``, writes and
reads every field) and the saved report's reader (``saved``: the file and the errors that name
the field). It imports no renderer.
"""
