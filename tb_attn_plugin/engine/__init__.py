"""One engine for every front door: resolving, reading, caching and fanning out summaries
(``workspace``, ``pipeline``, ``loader``, ``fanout``, ``summary_cache``...)."""
