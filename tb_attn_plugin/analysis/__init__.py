"""Pure analysis over the event model: attribution, FLOPs, backends, inference, summaries.

Nothing here opens files, logs above DEBUG or keeps global state.
"""
