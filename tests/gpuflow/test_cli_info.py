"""`gpuflow --version` and `gpuflow policies [--json]`: what a user asks the CLI first."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest

from gpuflow.cli import main
from policies.registry import policy_names


def test_version_is_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"gpuflow {version('gpuflow')}\n"


def test_policies_is_a_table_of_name_description_and_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["policies"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "DESCRIPTION", "OPTIONS"]
    starts = [line.split()[0] for line in lines[1:] if not line.startswith(" ")]
    assert starts == policy_names()
    tiresias = next(line for line in lines if line.startswith("tiresias "))
    assert "discretized two-dimensional attained-service scheduling." in tiresias
    assert "thresholds_gpu_s=[3250.0,7200.0]" in tiresias
    # A dataclass signature is not a description, nor a function's address an option.
    text = "\n".join(lines)
    assert "Fifo(" not in text and " at 0x" not in text
    assert 'loss_source="reported_loss"' in text


def test_policies_json_lists_each_with_its_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == policy_names()
    by_name = {r["name"]: r for r in rows}
    assert by_name["fifo"] == {
        "name": "fifo",
        "description": "the YARN capacity scheduler as deep-learning cluster studies run it.",
        "options": {"backfill": False, "aware": True},
    }
    assert by_name["tiresias"]["options"]["starve_limit"] == 8.0
    assert by_name["srtf"]["options"] == {"aware": True}
