"""Moved to detrun.record.status; kept for code written against this name."""

from ..record.status import RunStatus, Status

__all__ = ["RunStatus", "Status"]
