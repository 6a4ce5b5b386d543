"""The benchmark command validates its shape before generating anything."""

import pytest

from backfill_assets.cli.main import main


@pytest.mark.parametrize("args", [["--payloads", "10"], ["--hours", "2"], ["--clients", "0"]])
def test_bench_rejects_shapes_too_small_to_measure(args: list[str], capsys):
    assert main(["bench", *args]) == 2
    assert "need --payloads >= 1000" in capsys.readouterr().err
