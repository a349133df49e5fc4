"""Moved to autotune.spec.json_file (the spec layer's readers use it: clusters, profiles, Hugging
Face configs); kept so that imports of the old name keep working."""

from autotune.spec.json_file import MAX_BYTES, MAX_DEPTH, check_tree, field_path, read_json_file, read_text_file

__all__ = ["read_json_file", "read_text_file", "check_tree", "MAX_BYTES", "MAX_DEPTH", "field_path"]
