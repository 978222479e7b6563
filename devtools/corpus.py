"""Writes the corpus of real-model traces that ``tests/models/`` checks the analysis against.

Each entry is one run of the runner on CPU: PyTorch's own attention modules, Hugging Face BERT,
GPT-2 and Llama (grouped-query) in eager and SDPA attention, in training (dropout on) and in
inference, the built-in model where a mask, dropout or the head dimension changes what SDPA
runs, and, in SDPA, blocks whose projections are not q, k and v alone: DeepSeek-V3's multi-head
latent attention and Gemma 3 with one KV head (QK-norms in pieces) in training, and BART's
cross-attention in inference (its query from the decoder, its keys and values from the encoder).
The traces are committed (gzipped, small sizes), so the expectations written by hand
in ``tests/models/expected.py`` are about fixed traces; run this again after a change to the
runner or to the pinned torch, then read the traces and the findings again before updating the
expectations.

    python -m devtools.corpus                 # rewrite tests/models/traces/
    python -m devtools.corpus hf-gpt2-eager-train   # just these entries

Every entry has a plain twin, ``<name>-plain``: the same run with ``--no-scopes`` (no scopes of
ours, no ``instrument()``), the trace a user brings. ``tests/models/test_plain_corpus.py`` checks
that inference says of it what the scopes say of its twin.

The sizes keep score tensors apart from every other tensor: B·H·S·S (2·4·48·48 elements) is not
B·S·D (2·48·128) or any weight's size, so a tensor of the score's size is a score.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["CORPUS", "PLAIN", "TRACES", "main"]

TRACES = Path(__file__).resolve().parents[1] / "tests" / "models" / "traces"
_COMMON = ["--seq", "48", "--batch", "2", "--size", "tiny", "--warmup", "1", "--active", "1", "--seed", "0",
           "--gzip", "--no-progress", "--device", "cpu"]
_TRAIN = ["--mode", "training", "--dropout", "0.1"]
_INFER = ["--mode", "inference"]

#: name -> the runner's arguments beyond ``_COMMON``.
CORPUS: dict[str, list[str]] = {
    "builtin-naive-infer": ["--model", "builtin", "--impl", "naive", *_INFER],
    "builtin-sdpa-mask-infer": ["--model", "builtin", "--impl", "sdpa", "--attn-mask", *_INFER],
    "builtin-sdpa-dropout-train": ["--model", "builtin", "--impl", "sdpa", *_TRAIN],
    "builtin-sdpa-hd12-infer": ["--model", "builtin", "--impl", "sdpa", "--d-model", "48", *_INFER],
    "torch-encoder-train": ["--model", "torch:encoder", "--impl", "sdpa", *_TRAIN],
    "torch-encoder-infer": ["--model", "torch:encoder", "--impl", "sdpa", *_INFER],
    "torch-mha-train": ["--model", "torch:mha", "--impl", "sdpa", *_TRAIN],
    "torch-mha-infer": ["--model", "torch:mha", "--impl", "sdpa", *_INFER],
    "torch-mha-weights-infer": ["--model", "torch:mha", "--impl", "naive", *_INFER],
    **{f"hf-{family}-{attn}-{mode}": ["--model", f"hf:{family}", "--impl", impl,
                                       *(["--kv-heads", "2"] if family == "llama" else []),
                                       *(_TRAIN if mode == "train" else _INFER)]
       for family in ("bert", "gpt2", "llama") for attn, impl in (("eager", "naive"), ("sdpa", "sdpa"))
       for mode in ("train", "infer")},
    "hf-deepseek-v3-sdpa-train": ["--model", "hf:deepseek-v3", "--impl", "sdpa", *_TRAIN],
    "hf-gemma3-mqa-sdpa-train": ["--model", "hf:gemma3", "--kv-heads", "1", "--impl", "sdpa", *_TRAIN],
    "hf-bart-sdpa-infer": ["--model", "hf:bart", "--impl", "sdpa", *_INFER],
}

#: Each entry's plain twin: the same run without scopes.
PLAIN: dict[str, list[str]] = {f"{name}-plain": [*args, "--no-scopes"] for name, args in CORPUS.items()}


def main(argv: list[str] | None = None) -> int:
    entries = {**CORPUS, **PLAIN}
    wanted = (argv if argv is not None else sys.argv[1:]) or list(entries)
    unknown = [w for w in wanted if w not in entries]
    if unknown:
        print(f"unknown corpus entries: {', '.join(unknown)}; choose from {', '.join(entries)}", file=sys.stderr)
        return 2
    TRACES.mkdir(parents=True, exist_ok=True)
    for name in wanted:
        target = TRACES / name
        print(name, flush=True)
        # Written beside the old traces, which are replaced only once the run succeeded.
        with tempfile.TemporaryDirectory(dir=TRACES) as tmp:
            cmd = [sys.executable, "-m", "runner", "--logdir", tmp, "--name", "run", *_COMMON, *entries[name]]
            done = subprocess.run(cmd, stdout=subprocess.DEVNULL)
            if done.returncode != 0:
                print(f"{name}: the runner failed (exit {done.returncode}); the old traces are kept", file=sys.stderr)
                return 1
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
            os.mkdir(tmp)  # for the context manager to remove
    return 0


if __name__ == "__main__":
    sys.exit(main())
