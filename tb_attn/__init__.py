"""tb-attn's Python API, for notebooks: ``tb_attn.load(path_or_profile)`` summarizes torch.profiler
traces as ``tb-attn summarize`` does and returns ``Summaries``, whose methods give pandas
DataFrames (``phases()``, ``layers()``, ``heads()``, ``findings()``...). pandas is an extra
(``pip install 'tb-attn[notebook]'``), imported only when a DataFrame is asked for.

    import tb_attn
    r = tb_attn.load("runs/")
    r.phases().groupby("phase")["cpu_us"].sum()
"""

from tb_attn.api import Summaries, TbAttnWarning, load

__all__ = ["Summaries", "TbAttnWarning", "load"]
