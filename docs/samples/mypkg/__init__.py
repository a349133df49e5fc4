"""A sample package for ``autotune graph --module mypkg.models:...`` in docs/profiling.md."""
