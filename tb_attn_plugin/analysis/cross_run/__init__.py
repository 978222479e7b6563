"""Many summaries to one result: runs side by side (compare, scaling, strategies, the gate) and a run's
ranks side by side."""
