"""max_autotune: measured choice between candidate implementations of each kernel.

``tuner.py`` benchmarks a kernel's candidates (:class:`~.tuner.Choice`) on its real inputs
and keeps the fastest, ``store.py`` keeps the winner on disk, ``progress.py`` shows a bar
while it runs; ``configs.py`` and ``triton_kernels.py`` make the candidates of a generated
Triton kernel (block sizes, warps, stages), ``templates.py`` a matmul's or a convolution's templates, and
``cpp_configs.py``, ``cpp_variants.py`` and ``cpp_kernels.py`` those of a generated C++
kernel (OpenMP or serial loops, reduction lanes).
"""
