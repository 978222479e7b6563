"""The compiled scanner under AddressSanitizer and UndefinedBehaviorSanitizer (``make sanitize``).

``build`` compiles ``tb_attn_plugin/trace/_scan.c`` with ``-fsanitize=address,undefined`` into
``build/sanitize/`` and leaves the build in the source tree alone. ``test`` loads that build in
place of the normal one, in its own process only (first on the package's ``__path__``, before
anything imports the scanner), and runs the scanner's differential and fuzz tests with it. Each
buffer the scanner reads is first copied into an allocation of exactly its size, so that reading
a byte past its end is an error ASan reports (a ``bytes`` object keeps a NUL byte after its end,
and small ones live in pymalloc's arenas, which ASan does not see into).

``test`` needs the ASan runtime loaded before the interpreter, which is not built with it, and
every error fatal; the Makefile's ``sanitize`` target runs it so::

    LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \\
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 PYTHONMALLOC=malloc \\
        python -m devtools.sanitize test
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tb_attn_plugin" / "trace" / "_scan.c"
OUT = ROOT / "build" / "sanitize" / "tb_attn_plugin" / "trace"
#: The scanner's differential tests (generated and mutated batches included) and the decoder's,
#: which send batches through it from several threads at once.
TESTS = ["tests/trace/test_scanned.py", "tests/trace/test_decode.py", "tests/trace/test_decode_bounds.py"]
FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1",
         "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror"]


def build() -> Path:
    """Compile the sanitized scanner; return the path of the extension."""
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / f"_scan{sysconfig.get_config_var('EXT_SUFFIX')}"
    cc = os.environ.get("CC", "gcc")
    command = [cc, "-shared", "-fPIC", *FLAGS, f"-I{sysconfig.get_paths()['include']}", str(SOURCE), "-o",
               str(target)]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)
    return target


class _ExactBuffers:
    """The sanitized module, with each input copied into an allocation of exactly its size."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.MAX_NAME_CHARS = module.MAX_NAME_CHARS
        self.__file__ = module.__file__

    def scan(self, text: Any) -> Any:
        data = bytes(text)
        if len(data) <= 16:  # ctypes keeps arrays this small inside the object: a bytes copy then
            return self.module.scan(data)
        return self.module.scan((ctypes.c_char * len(data)).from_buffer_copy(data))


def test(pytest_args: list[str]) -> int:
    """Run the tests with the sanitized scanner; return pytest's exit status."""
    if "asan" not in os.environ.get("LD_PRELOAD", ""):
        sys.exit("the ASan runtime must be preloaded: run `make sanitize`")
    import tb_attn_plugin.trace as trace_package

    assert "tb_attn_plugin.trace.scanned" not in sys.modules, "the scanner was imported before its path was set"
    trace_package.__path__.insert(0, str(OUT))
    from tb_attn_plugin.trace import scanned

    module = scanned._scan
    if module is None or not Path(module.__file__).is_relative_to(OUT):
        sys.exit(f"the sanitized scanner was not loaded ({module}): run `make sanitize`")
    print(f"scanner: {module.__file__}", flush=True)
    scanned._scan = _ExactBuffers(module)

    import pytest

    # --capture=sys: a sanitizer writes its report to file descriptor 2 and ends the process, so
    # pytest must not be capturing that descriptor (the report would go with it).
    return int(pytest.main(["-p", "no:cacheprovider", "--capture=sys", *TESTS, *pytest_args]))


def main() -> None:
    if sys.argv[1:2] == ["build"]:
        build()
    elif sys.argv[1:2] == ["test"]:
        sys.exit(test(sys.argv[2:]))
    else:
        sys.exit("usage: python -m devtools.sanitize build|test [pytest arguments]")


if __name__ == "__main__":
    main()
