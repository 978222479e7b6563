"""The ``tb-attn`` command line: ``main`` parses and dispatches, ``batch`` holds the flags and
helpers every command shares, ``report*`` write the text, CSV and JSON."""
