"""A local S3 server (moto, on loopback) holding runner runs, and the settings that point s3fs at it.

The endpoint is configured as docs/remote.md tells users to: ``AWS_ENDPOINT_URL`` and
credentials in the environment, which botocore reads for s3fs (our tab) and for boto3
(TensorBoard's own S3 reader). ``AWS_MAX_ATTEMPTS=1`` turns botocore's retries off, so that a
stopped server fails in milliseconds rather than after seconds of backoff.
"""

from __future__ import annotations

import gzip
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from remotetools import BUCKET, LocalS3

RUNS = ("naive", "sdpa")  # uploaded as they are
GZIPPED = "sdpa-math"  # uploaded with its trace gzipped


@pytest.fixture(scope="session")
def local_runs(builtin_logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``exp/naive``, ``exp/sdpa`` and ``exp/sdpa-math`` (trace gzipped), as they lie in the bucket."""
    root = tmp_path_factory.mktemp("remote-local")
    for run in RUNS:
        shutil.copytree(builtin_logdir / run, root / "exp" / run)
    target = root / "exp" / GZIPPED
    shutil.copytree(builtin_logdir / GZIPPED, target)
    for trace in target.glob("*.pt.trace.json"):
        trace.with_name(trace.name + ".gz").write_bytes(gzip.compress(trace.read_bytes(), compresslevel=1))
        trace.unlink()
    return root


@pytest.fixture(scope="session")
def s3(local_runs: Path) -> Iterator[LocalS3]:
    """The server, with ``local_runs`` uploaded under ``s3://team-bucket/runs/``."""
    with pytest.MonkeyPatch.context() as mp:
        # Nothing of the machine's AWS set-up may leak in.
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL",
                     "S3_ENDPOINT", "FSSPEC_S3"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("AWS_MAX_ATTEMPTS", "1")
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        werkzeug = logging.getLogger("werkzeug")  # moto's server logs every request at INFO
        level = werkzeug.level
        werkzeug.setLevel(logging.WARNING)
        server = LocalS3()
        try:
            server.client.create_bucket(Bucket=BUCKET)
            server.upload(BUCKET, "runs", local_runs)
            mp.setenv("AWS_ENDPOINT_URL", server.endpoint)
            yield server
        finally:
            server.close()
            werkzeug.setLevel(level)


@pytest.fixture(autouse=True)
def fresh_filesystems() -> Iterator[None]:
    """No s3fs instance (with its connections and settings) is shared between tests."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    yield
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def s3_watched(s3: LocalS3) -> Iterator[LocalS3]:
    """The server with its request log cleared; afterwards it runs again, the code under test
    sent it no write, and every object under ``runs/`` is as it was (same ETag and size)."""
    before = s3.listing(BUCKET, "runs/")
    s3.proxy.requests.clear()
    yield s3
    if not s3.proxy.running:
        s3.proxy.start()  # on the same port
    assert s3.proxy.writes() == []
    assert s3.listing(BUCKET, "runs/") == before

