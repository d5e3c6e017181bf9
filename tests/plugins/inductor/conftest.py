"""Fixtures shared by the inductor plugin's tests."""

import pytest


@pytest.fixture
def sm90(tmp_path, monkeypatch):
    """Compiling for an H100's target (``sm90``) through the compile-only driver, no GPU
    needed (Triton's wheel carries ``ptxas``), into fresh Triton and torchkiln caches; the
    compile workers stopped after. Only workers and child processes compile: the test suite
    imported Triton's language to interpret it (``TRITON_INTERPRET=1``), so nothing compiles
    in this process (``triton_workers._drain_here`` is turned off). Yields Triton's cache."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    from torchkiln_inductor.codegen import triton_workers
    from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver

    monkeypatch.setattr(triton_workers, "_drain_here", lambda todo, device: (0, 0, 0.0))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path / "kiln"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # compile: the test suite interprets
    driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
    yield tmp_path / "triton"
    driver._active = None  # the real driver again, on next use
    if triton_workers._pool is not None:
        triton_workers._pool.close()
    triton_workers._pool, triton_workers._stopped = None, False
