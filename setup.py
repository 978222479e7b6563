import sys

from setuptools import Extension, find_packages, setup

# The base install is the tab and the `tb-attn` CLI: it reads traces and never imports torch, so
# it installs beside whatever PyTorch a team already runs (a CUDA build, a nightly) without
# touching it. The runner brings torch as a range; the tested version is pinned in
# constraints/ for `make` and CI, never here.
RUNNER = ["torch>=2.4", "transformers>=4.48", "tqdm"]
PROFILER_TAB = ["torch-tb-profiler>=0.4.3"]
# Older s3fs releases have no aiobotocore and break on fsspec's current API; pip falls back to
# them when a newer boto3 conflicts with aiobotocore's botocore pin.
S3 = ["s3fs>=2024.1"]
# --quant: the attention projections quantized by torchao (int8 weights and activations).
QUANT = ["torchao>=0.10"]
# The training loops' integrations (tb_attn.integrations): Hugging Face's Trainer (which needs
# accelerate), PyTorch Lightning, Accelerate; each with the runner's torch and instrument().
TRANSFORMERS = [*RUNNER, "accelerate>=1.0"]
LIGHTNING = [*RUNNER, "pytorch-lightning>=2.2"]
ACCELERATE = [*RUNNER, "accelerate>=1.0"]
# The Python API's DataFrames (tb_attn.load): pandas is imported by that API only, never by the tab.
NOTEBOOK = ["pandas>=2"]
# Summaries fanned out to a Dask cluster (--executor dask://HOST:PORT, executor= in the API).
DASK = ["dask[distributed]>=2024.1"]

# The Kineto event scanner, an accelerator of the decoder (tb_attn_plugin/trace/scanned.py). Optional:
# where it cannot be compiled the install goes on and the decoder takes its pure path, with the
# same results. Wheels carry it built (cibuildwheel, see docs/architecture.md).
SCANNER = Extension("tb_attn_plugin.trace._scan", ["tb_attn_plugin/trace/_scan.c"], optional=True,
                    extra_compile_args=["-O2"] if sys.platform != "win32" else [])

setup(
    name="tb-attn",
    version="0.1.0",
    description="A TensorBoard plugin and trace workflow that shows where transformer attention spends time and memory",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["runner", "runner.*", "tb_attn", "tb_attn.*", "tb_attn_plugin",
                                    "tb_attn_plugin.*"]),
    ext_modules=[SCANNER],
    package_data={"runner": ["py.typed"], "tb_attn": ["py.typed"],
                  "tb_attn_plugin": ["py.typed", "static/*", "static/**/*"]},
    install_requires=[
        "tensorboard>=2.21",
        "protobuf",
        "numpy",
        "msgspec>=0.18",
        "fsspec",
        # ISA-L's inflate for gzipped traces (zlib where it is missing); wheels for these machines.
        "isal>=1.6; platform_machine in 'x86_64 AMD64 aarch64 arm64'",
    ],
    extras_require={
        "runner": RUNNER,
        "profiler-tab": PROFILER_TAB,
        "s3": S3,
        "quant": QUANT,
        "notebook": NOTEBOOK,
        "dask": DASK,
        "transformers": TRANSFORMERS,
        "lightning": LIGHTNING,
        "accelerate": ACCELERATE,
        "gcs": ["gcsfs>=2024.1"],
        "azure": ["adlfs>=2024.1"],
        # The suite profiles real models and training loops, and runs beside torch-tb-profiler.
        "test": [*RUNNER, *PROFILER_TAB, *TRANSFORMERS, *LIGHTNING, *S3, *QUANT, *NOTEBOOK, *DASK, "pytest",
                 "hypothesis", "ruff", "mypy", "playwright", "moto[server]>=5", "boto3", "nbclient", "nbformat",
                 "ipykernel"],
    },
    entry_points={
        "console_scripts": [
            "tb-attn-run=runner.cli:main",
            "tb-attn=tb_attn_plugin.cli.main:main",
        ],
        "tensorboard_plugins": [
            "tb_attn=tb_attn_plugin.server.plugin:AttentionLoader",
        ],
    },
)
