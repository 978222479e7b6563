"""Reading traces: file access (``io``), discovery of runs, decoding into the event model.

``io`` is the only module in the package that opens files; ``schema`` is the only one that
knows how torch.profiler spells categories and fields.
"""
