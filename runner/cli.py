"""``tb-attn-run`` / ``python -m runner``: profile attention into a TensorBoard log directory.

Comma-separated ``--impl``, ``--seq`` and ``--dtype`` make a sweep: one run per combination,
named ``<model>/<impl>/seq<S>[-<dtype>]``. Bad input gets one line on stderr and exit code 2,
before anything is written. Exit code 1 means some run failed (unsupported is not a failure);
130 means Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from runner.config import DTYPES, KV_CACHES, MODES, PARALLEL, ConfigError, ModelConfig, ProfileConfig
from tb_attn_plugin.vocab.impls import IMPLS

if TYPE_CHECKING:
    from runner.session import RunSpec

__all__ = ["DEMO_ARGS", "build_parser", "main", "plan_sweep", "run_name"]

PROG = "tb-attn-run"
#: Repeats of one run a sweep may ask for: the verdicts need 2 or 3; more is a different experiment.
MAX_REPEATS = 20

#: What the runner imports beyond the base install, which `pip install 'tb-attn[runner]'` adds.
RUNNER_EXTRA = ("torch", "tqdm")

#: The demo: a small CPU sweep of four implementations at two lengths (three repeats each), one run with each head in
#: its own scope (measured heads for the Heads view, with their attention statistics: random
#: weights, so the view says they mean nothing), a Hugging Face model, flex_attention against
#: naive attention on one sliding-window mask, a compiled block, the strategies (exact, linear and
#: int8 attention side by side, under strategies/), and generation with a KV cache (generation/).
DEMO_ARGS: tuple[list[str], ...] = (
    # Three repeats each, in turns, so that Compare, Strategies and the gate can tell the
    # implementations apart from drift between runs (docs/runner.md, "Repeats").
    ["--model", "builtin", "--size", "small", "--impl", "naive,naive-inplace,sdpa-math,sdpa", "--seq", "256,512",
     "--repeats", "3"],
    ["--model", "builtin", "--size", "small", "--impl", "naive", "--seq", "256", "--per-head", "--attn-stats"],
    ["--model", "hf:gpt2", "--size", "small", "--impl", "naive,sdpa", "--seq", "256"],
    # Sparse against dense on the same sliding-window mask, and a compiled block (inference:
    # flex_attention has no backward on CPU). Each compiles once, in its warm-up step; inductor
    # caches the code on disk, so a second demo reuses it.
    ["--model", "builtin", "--size", "small", "--impl", "flex,naive", "--mask", "sliding:128", "--seq", "512",
     "--mode", "inference"],
    ["--model", "builtin", "--size", "small", "--impl", "naive", "--compile", "--seq", "256", "--mode", "inference"],
    # The strategies: exact, linear, random-feature and int8 attention at two lengths, each with
    # its error against exact fp32 attention (inference: int8-qk has no gradient).
    ["--model", "builtin", "--size", "small", "--impl", "naive,sdpa,linear-elu,performer,int8-qk", "--seq", "256,512",
     "--mode", "inference", "--name", "strategies"],
    # Generation: a prompt, then 32 tokens one at a time against a static and a dynamic KV cache,
    # at three prompt lengths (the Generation view, and decode cost against context in Compare).
    ["--model", "builtin", "--size", "small", "--impl", "sdpa", "--mode", "generate", "--prompt-len", "128,512,2048",
     "--new-tokens", "32", "--kv-cache", "static,dynamic", "--name", "generation"],
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _csv(kind: Callable[[str], object]) -> Callable[[str], list[object]]:
    def parse(text: str) -> list[object]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"empty list: {text!r}")
        try:
            return [kind(t) for t in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a list of {getattr(kind, '__name__', kind)}: {text!r}") from None

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Profile transformer attention into TensorBoard traces.")
    p.add_argument("--logdir", default="runs", help="TensorBoard log directory (default: runs)")
    p.add_argument("--model", default="builtin",
                   help="builtin, hf:bert, hf:gpt2, hf:llama, hf:gemma3, hf:deepseek-v3, hf:bart, torch:encoder or "
                        "torch:mha (default: builtin)")
    p.add_argument("--impl", type=_csv(str), default=["naive"],
                   help=f"attention implementation(s), comma-separated: {', '.join(IMPLS)}")
    p.add_argument("--seq", type=_csv(int), default=None, help="sequence length(s), comma-separated")
    p.add_argument("--dtype", type=_csv(str), default=["float32"], help=f"dtype(s): {', '.join(DTYPES)}")
    p.add_argument("--size", choices=("tiny", "small", "base"), default="tiny",
                   help="named model size: layers, heads and d_model (default: tiny)")
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int, help="key/value heads for grouped-query attention")
    p.add_argument("--d-model", type=int)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--attn-mask", action="store_true",
                   help="builtin model, sdpa implementations: pass the causal mask as a boolean attn_mask tensor "
                        "instead of is_causal=True (as many models do)")
    p.add_argument("--mask", type=_csv(str), default=None,
                   help="attention mask(s), comma-separated: causal, sliding:W, document:N, prefix:P, block:DENSITY; "
                        "the same mask for every implementation (flex: a BlockMask; naive, sdpa: a boolean tensor). "
                        "Default: causal (or none with --no-causal)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile each attention block (its phases fuse into one 'compiled' phase; the "
                        "compile runs in the warm-up step)")
    p.add_argument("--features", type=int, default=256, metavar="M",
                   help="performer: random features per head (default 256)")
    p.add_argument("--quant", default=None, metavar="SCHEME",
                   help="quantize the q/k/v and output projections with torchao: int8 (dynamic activations, "
                        "int8 weights; inference)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda when present)")
    p.add_argument("--mode", choices=MODES, default="training",
                   help="training (forward, backward, optimizer), inference (one forward), or generate (a "
                        "prompt, then one token at a time against a KV cache)")
    gen = p.add_argument_group("--mode generate")
    gen.add_argument("--prompt-len", type=_csv(int), default=None, metavar="P",
                     help="prompt tokens (the prefill step), comma-separated for a sweep")
    gen.add_argument("--new-tokens", type=int, default=None, metavar="N",
                     help="decode steps after the prompt, one token each (default 32)")
    gen.add_argument("--kv-cache", type=_csv(str), default=["dynamic"],
                     help=f"the KV cache, comma-separated: {', '.join(KV_CACHES)} (preallocated; dynamic grows "
                          "by torch.cat, copying the cache every token). Default: dynamic")
    p.add_argument("--per-head", action="store_true", help="compute each head in its own scope")
    p.add_argument("--no-scopes", dest="scopes", action="store_false",
                   help="write no tb-attn scopes, as a plain training script does (run name: IMPL-unscoped); "
                        "the analysis then infers attention")
    p.add_argument("--hf-config", action="append", default=[], metavar="KEY=VALUE",
                   help="override a Hugging Face config field (repeatable)")
    p.add_argument("--attn-stats", nargs="?", type=int, const=2, default=0, metavar="BATCHES",
                   help="measure each head's attention statistics (entropy, sinks, windows, top-k, distance) on "
                        "BATCHES batches (default 2) outside the profiled steps, and write them as TensorBoard "
                        "event files into the run. Random weights give meaningless statistics: use --checkpoint")
    p.add_argument("--checkpoint", default=None, metavar="PATH",
                   help="Hugging Face models: load the weights saved in this local directory (save_pretrained); "
                        "nothing is downloaded")
    d = p.add_argument_group("torchrun")
    d.add_argument("--parallel", choices=PARALLEL, default=None,
                   help="ddp: data parallel; tp: attention heads split over ranks (builtin); none: each rank "
                        "alone (default: ddp under torchrun when training, else none)")
    d.add_argument("--slow-rank", type=int, metavar="R",
                   help="make rank R a straggler (with --slow-ms or --slow-factor)")
    d.add_argument("--slow-ms", type=float, default=0.0, metavar="X",
                   help="extra milliseconds that --slow-rank spends in every attention block")
    d.add_argument("--slow-factor", type=float, default=0.0, metavar="F",
                   help="extra time that --slow-rank spends in every attention block, as F times the block's own "
                        "(0.5: half again as long), so that it stands out on a slow or busy machine too")
    d.add_argument("--jitter-ms", type=float, default=0.0, metavar="X",
                   help="builtin: every attention block sleeps X ms in every other step, a run noisy on purpose "
                        "(to see the spread and the noisy marks)")
    g = p.add_argument_group("profiler")
    g.add_argument("--wait", type=int, default=1)
    g.add_argument("--warmup", type=int, default=1)
    g.add_argument("--active", type=int, default=5,
                   help="profiled steps per cycle (default 5: fewer cannot tell a slow step from a slow run)")
    g.add_argument("--repeat", type=int, default=1)
    g.add_argument("--no-record-shapes", dest="record_shapes", action="store_false")
    g.add_argument("--no-profile-memory", dest="profile_memory", action="store_false")
    g.add_argument("--with-stack", action="store_true")
    g.add_argument("--gzip", action="store_true", help="write .pt.trace.json.gz (fast, level --gzip-level)")
    g.add_argument("--gzip-level", type=int, default=1)
    o = p.add_argument_group("output")
    o.add_argument("--name", default="", help="prefix for run names, e.g. a date or an experiment")
    o.add_argument("--overwrite", action="store_true", help="replace runs that already exist")
    o.add_argument("--repeats", type=int, default=1, metavar="N",
                   help="profile each run N times, interleaved with the sweep's other runs (A B A B...), as one "
                        "run's repeats: what Compare, Strategies and the gate need to tell a change from drift "
                        "between runs (docs/runner.md, 'Repeats')")
    o.add_argument("--append", action="store_true",
                   help="add this profile to runs that exist, as one more repeat of each (profile a baseline and a "
                        "candidate in turns: docs/ci.md)")
    o.add_argument("--seed", type=int, default=0)
    o.add_argument("--no-progress", dest="progress", action="store_false")
    o.add_argument("--demo", action="store_true", help="run the built-in demo sweep into --logdir")
    return p


def _resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _model_label(model: str) -> str:
    return model.replace(":", "-")


def world_size() -> int:
    """The number of ranks torchrun started (1 outside torchrun)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def default_parallel(mode: str, ranks: int) -> str:
    return "ddp" if ranks > 1 and mode == "training" else "none"


def mask_label(mask: str | None) -> str:
    """A mask in a run name: ``sliding:256`` -> ``sliding256`` (no ``:`` in paths); the plain
    causal mask adds nothing."""
    return "" if mask in (None, "causal") else "-" + str(mask).replace(":", "")


def run_name(model: str, cfg: ModelConfig, prefix: str = "") -> str:
    impl = (cfg.impl + (f"-m{cfg.features}" if cfg.impl == "performer" and cfg.features != 256 else "")
            + (f"-{cfg.quant}" if cfg.quant else "") + ("-compiled" if cfg.compile else "") + mask_label(cfg.mask)
            + ("-per-head" if cfg.per_head else "") + ("-tp" if cfg.parallel == "tp" else "")
            + ("" if cfg.scopes else "-unscoped"))
    if cfg.mode == "generate":
        # Cache kind and KV heads are in the name: comparing them is what generation runs are for.
        kv = f"-kv{cfg.n_kv_heads}" if cfg.n_kv_heads != cfg.heads else ""
        name = f"{_model_label(model)}/{impl}/gen-p{cfg.prompt_len}-n{cfg.new_tokens}-{cfg.kv_cache}{kv}"
    else:
        name = f"{_model_label(model)}/{impl}/seq{cfg.seq}"
    if cfg.dtype != "float32":
        name += f"-{cfg.dtype}"
    return f"{prefix.strip('/')}/{name}" if prefix.strip("/") else name


def plan_sweep(args: argparse.Namespace) -> list[RunSpec]:
    """Every run the arguments ask for, validated. Raises ConfigError."""
    from runner.models import SIZES, check_model_spec, parse_hf_overrides
    from runner.session import RunSpec

    layers, heads, d_model = SIZES[args.size]
    device = _resolve_device(args.device)
    hf = parse_hf_overrides(args.hf_config)
    seqs = args.seq if args.seq is not None else [128]
    generate = args.mode == "generate"
    if not generate and (args.prompt_len is not None or args.new_tokens is not None or args.kv_cache != ["dynamic"]):
        raise ConfigError("--prompt-len, --new-tokens and --kv-cache belong to --mode generate")
    if generate and args.prompt_len is None:
        raise ConfigError("--mode generate needs --prompt-len P (the prompt's tokens)")
    if generate and len(seqs) > 1:
        raise ConfigError("--mode generate takes one --seq (the model's positions); sweep --prompt-len instead")
    new_tokens = args.new_tokens if args.new_tokens is not None else 32
    prompts = args.prompt_len if generate else [0]
    caches = args.kv_cache if generate else ["dynamic"]
    ranks = world_size()
    parallel = args.parallel or default_parallel(args.mode, ranks)
    specs: list[RunSpec] = []
    names: set[str] = set()
    masks = args.mask if args.mask is not None else [None]
    for impl, mask, seq, dtype, prompt, cache in itertools.product(args.impl, masks, seqs, args.dtype, prompts,
                                                                  caches):
        if generate and args.seq is None:
            seq = prompt + new_tokens  # the model's positions: the whole generation
        cfg = ModelConfig(
            layers=args.layers if args.layers is not None else layers,
            heads=args.heads if args.heads is not None else heads,
            kv_heads=args.kv_heads,
            d_model=args.d_model if args.d_model is not None else d_model,
            seq=seq, batch=args.batch, vocab=args.vocab, dtype=dtype, causal=args.causal,
            dropout=args.dropout, attn_mask=args.attn_mask, device=device, mode=args.mode, impl=impl,
            per_head=args.per_head,
            scopes=args.scopes, parallel=parallel, slow_rank=args.slow_rank, slow_ms=args.slow_ms,
            slow_factor=args.slow_factor,
            jitter_ms=args.jitter_ms, mask=mask, mask_seed=args.seed, compile=args.compile,
            features=args.features, quant=args.quant, attn_stats=args.attn_stats, checkpoint=args.checkpoint,
            prompt_len=prompt if generate else 0, new_tokens=new_tokens if generate else 0, kv_cache=cache,
        )
        check_model_spec(args.model, cfg, hf, world_size=ranks)
        name = run_name(args.model, cfg, args.name)
        if name in names:
            raise ConfigError(f"the sweep lists {name} twice")
        names.add(name)
        specs.append(RunSpec(model=args.model, cfg=cfg, name=name, hf_overrides=hf, repeats=args.repeats))
    return specs


def check_logdir(logdir: Path) -> None:
    """Fail before any work if runs could not be written under ``logdir``."""
    probe = logdir
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"logdir {logdir} is not a directory ({probe} is a file)")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write to logdir {logdir}: {exc.strerror or exc}") from None


def check_existing(logdir: Path, specs: Sequence[RunSpec], overwrite: bool) -> None:
    from runner.traces import TRACE_FILE_RE

    for spec in specs:
        run_dir = logdir / spec.name
        if run_dir.is_dir() and any(TRACE_FILE_RE.match(p.name) for p in run_dir.iterdir()):
            if not overwrite:
                raise ConfigError(f"run {spec.name} already has traces in {logdir}; pass --overwrite "
                                  "to replace it, or --name to write beside it")


def missing_runner_packages() -> list[str]:
    """The runner extra's packages that are not installed (the base install has none of them)."""
    return [name for name in RUNNER_EXTRA if importlib.util.find_spec(name) is None]


#: Loggers whose warnings a run cannot act on: torchao (installed for --quant; transformers imports
#: it whenever it is present) warns at import for each of its compiled kernels built for another
#: torch ("Failed to load _C...so"; the int8 path used here is Python), and torch's pytree for
#: torchao's enum registrations.
QUIET_LOGGERS = ("torchao", "torch.utils._pytree")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(message)s")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    parser = build_parser()
    args = parser.parse_args(argv)
    if missing := missing_runner_packages():
        print(f"{PROG}: error: the runner needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
              "not installed: pip install 'tb-attn[runner]'", file=sys.stderr)
        return 2
    groups = [args] if not args.demo else [parser.parse_args([*a, "--logdir", args.logdir, "--overwrite"])
                                           for a in DEMO_ARGS]
    logdir = Path(args.logdir)
    try:
        plans = [plan_sweep(g) for g in groups]
        check_logdir(logdir)
        specs = [s for plan in plans for s in plan]
        for g, plan in zip(groups, plans, strict=True):
            if g.append and g.overwrite:
                raise ConfigError("--append adds to runs and --overwrite replaces them: give one")
            if not 1 <= g.repeats <= MAX_REPEATS:
                raise ConfigError(f"--repeats must be in 1..{MAX_REPEATS}, got {g.repeats}")
            if not g.append:
                check_existing(logdir, plan, g.overwrite)
        profile_cfg = ProfileConfig(
            wait=args.wait, warmup=args.warmup, active=args.active, repeat=args.repeat,
            record_shapes=args.record_shapes, profile_memory=args.profile_memory,
            with_stack=args.with_stack, gzip=args.gzip, gzip_level=args.gzip_level,
        )
    except ConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    from runner.sweep import run_sweep

    code = run_sweep(specs, logdir, profile_cfg, overwrite=any(g.overwrite for g in groups), append=args.append,
                     progress=args.progress, seed=args.seed)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # Every trace and the metadata are written and the process group is destroyed. The
        # interpreter's own teardown sometimes aborts here ("terminate called without an active
        # exception": a thread of the distributed runtime still joinable at exit), which torchrun
        # would report as the run failing; one in about a dozen runs did, on 2 busy cores.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
