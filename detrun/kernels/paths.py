"""Moved to detrun.record.paths; kept for code written against this name."""

from ..record.paths import PATH_DECODE, PATH_PAGED, PATH_RAGGED, PATH_RAGGED_PREFIX

__all__ = ["PATH_DECODE", "PATH_PAGED", "PATH_RAGGED", "PATH_RAGGED_PREFIX"]
