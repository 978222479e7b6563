"""placeholder: the notebook API (tb_attn.load) is being written."""
