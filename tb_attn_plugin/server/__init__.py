"""The TensorBoard plugin: its routes (``plugin``), the service behind them, job lanes, prefetch,
the run registry and the HTTP bodies that only the routes send (``responses``)."""
