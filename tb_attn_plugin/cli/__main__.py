"""``python -m tb_attn_plugin.cli``: the ``tb-attn`` command."""

import sys

from tb_attn_plugin.cli.main import main

sys.exit(main())
