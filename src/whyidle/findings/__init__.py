"""The findings layer: the rules that turn analyses into ranked findings with evidence and fixes
(``rules``, ``nsys_rules``, ``counter_rules``, ...), the levers, the CI gate, and the diagnosis as
data (``model.DiagnosisData``: every gap, the device activity, the findings) with its JSON
reader (``saved``). It imports no renderer.
"""
