"""Names and shapes to work: op names, FLOPs, bytes per element, the SDPA backend that ran and why."""
