"""The floor every room stands on: words, bounds, statistics, the clock, a run's configuration."""
