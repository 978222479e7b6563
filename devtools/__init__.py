"""Development tools shared by the tests and the benchmarks. Not shipped: setup.py packages only
``runner`` and ``tb_attn_plugin``."""
