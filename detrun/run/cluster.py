"""Offline check of a cluster-launcher YAML with Ray's own validation (a private Ray API, wrapped here)."""

from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import DetrunError, first_line


def validate_cluster_yaml(path: Path) -> dict:
    """Load, fill defaults and validate like `ray up` would, without touching any host or cloud."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    try:
        config = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise DetrunError(f"{path}: cannot read cluster YAML ({exc})") from None
    if not isinstance(config, dict):
        raise DetrunError(f"{path}: a cluster YAML must be a mapping")
    try:
        prepared = prepare_config(config)
        validate_config(prepared)
    except Exception as exc:  # jsonschema, click and ValueError all mean "invalid"
        message = first_line(exc, typed=False, text=str(getattr(exc, "message", exc)))
        raise DetrunError(f"{path}: invalid cluster config: {message}") from None
    return prepared
