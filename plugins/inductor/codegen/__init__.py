"""Code generators: C++/OpenMP kernels (cpp) and the Python wrapper (wrapper)."""
