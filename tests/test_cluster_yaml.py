"""ray_cluster.yaml is checked offline with Ray's own prepare_config + validate_config."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.run.cluster import validate_cluster_yaml
from tests.helpers import ROOT

YAML = ROOT / "ray_cluster.yaml"


def _aws_variant(tmp_path: Path) -> Path:
    """The commented cloud variant, uncommented in place of the local provider."""
    text = YAML.read_text()
    commented = [line[2:] for line in text.split("# --- Cloud variant", 1)[1].splitlines()]
    block = "\n".join(commented[commented.index("provider:"):])
    data = yaml.safe_load(text)
    for key in ("provider", "auth", "head_start_ray_commands", "worker_start_ray_commands"):
        data.pop(key)
    data.update(yaml.safe_load(block))
    path = tmp_path / "aws.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_local_provider_yaml_is_valid_and_declares_gpus():
    config = validate_cluster_yaml(YAML)
    assert config["provider"]["type"] == "local"
    assert list(config["available_node_types"]) == ["local.cluster.node"]  # Ray injects the one type
    assert any("--num-gpus" in c for c in config["head_start_ray_commands"])
    assert any("--num-gpus" in c for c in config["worker_start_ray_commands"])


def test_commented_aws_variant_is_valid(tmp_path):
    config = validate_cluster_yaml(_aws_variant(tmp_path))
    assert config["provider"]["type"] == "aws"
    assert config["available_node_types"]["h100x8"]["resources"]["GPU"] == 8


def test_local_provider_rejects_node_types(tmp_path):
    data = yaml.safe_load(YAML.read_text())
    data["available_node_types"] = {"gpu": {"resources": {"GPU": 8}, "node_config": {}}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(DetrunError, match="bad.yaml: invalid cluster config: .*available_node_types"):
        validate_cluster_yaml(bad)


def test_validate_cluster_exits_0_on_the_shipped_yaml_and_2_on_a_bad_one(tmp_path):
    ok = CliRunner().invoke(app, ["validate-cluster", str(YAML)])
    assert ok.exit_code == 0 and "valid" in ok.stdout
    (tmp_path / "x.yaml").write_text("provider: {type: local}\n")
    bad = CliRunner().invoke(app, ["validate-cluster", str(tmp_path / "x.yaml")])
    assert bad.exit_code == 2
