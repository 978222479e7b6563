"""The data the engine hands out: the run summary (``schema``) and the analyses' results
(``results``, ``strategies``, ``views``), msgspec Structs the CLI, the API and the routes serialize."""
