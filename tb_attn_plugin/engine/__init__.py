"""One engine for every front door: resolving, reading, caching and fanning out summaries
(``loader``, ``fanout``, ``summary_cache``...)."""
