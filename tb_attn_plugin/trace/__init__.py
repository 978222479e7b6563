"""Reading traces: file access (``io``), discovery of runs, decoding into the event model.

``io`` is the only module in the package that opens files; ``kineto`` is the only one that
knows how torch.profiler spells categories and fields. Decoding is framing (``decode``), the
column builder (``columns``), lenient coercion (``coerce``), whitespace (``filler``) and the
several-process decode of large local files (``parallel``). Nothing here imports ``analysis``.
"""
