"""Micro-benchmarks and tracing with PyTorch: the measurements behind ``autotune profile``.

The only top-level package that imports torch; ``autotune`` itself imports it lazily.
"""
