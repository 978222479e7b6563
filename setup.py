from setuptools import find_packages, setup

setup(
    name="tb-attn",
    version="0.1.0",
    description="A TensorBoard plugin and trace workflow that shows where transformer attention spends time and memory",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["runner", "runner.*", "tb_attn_plugin", "tb_attn_plugin.*"]),
    package_data={"runner": ["py.typed"], "tb_attn_plugin": ["py.typed", "static/*", "static/**/*"]},
    install_requires=[
        "torch==2.13.0",
        "tensorboard>=2.21",
        "torch-tb-profiler>=0.4.3",
        "protobuf",
        "numpy",
        "tqdm",
        "transformers>=4.48",
        "msgspec>=0.18",
        "fsspec",
    ],
    extras_require={
        "test": ["pytest", "hypothesis", "ruff", "mypy", "playwright", "moto[server]>=5", "s3fs>=2024.1", "boto3"],
        # Older s3fs releases have no aiobotocore and break on fsspec's current API; pip falls
        # back to them when a newer boto3 conflicts with aiobotocore's botocore pin.
        "s3": ["s3fs>=2024.1"],
        "gcs": ["gcsfs>=2024.1"],
        "azure": ["adlfs>=2024.1"],
    },
    entry_points={
        "console_scripts": [
            "tb-attn-run=runner.cli:main",
            "tb-attn=tb_attn_plugin.cli:main",
        ],
        "tensorboard_plugins": [
            "tb_attn=tb_attn_plugin.plugin:AttentionLoader",
        ],
    },
)
