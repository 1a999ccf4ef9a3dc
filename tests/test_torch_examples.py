"""examples/gcn.py, gat.py and pyg_gcn.py train as a user runs them (subprocess), small and untuned."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("script,extra", [("gcn.py", ["--hidden", "16"]), ("gat.py", ["--hidden", "8"]),
                                          ("pyg_gcn.py", ["--hidden", "16"])])
def test_example_trains(script, extra, tmp_path):
    if script == "pyg_gcn.py":
        pytest.importorskip("torch_geometric", reason="pyg_gcn.py needs the [pyg] extra (torch_geometric)")
    # the installed package (its compiled extension included), as a user runs the examples
    run = subprocess.run([sys.executable, str(ROOT / "examples" / script), "--nodes", "400", "--epochs", "20",
                          "--threads", "1", "--no-tune", "--cache-dir", str(tmp_path), *extra],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    losses = [float(v) for v in re.findall(r"loss ([0-9.]+)", run.stdout)]
    accuracy = float(re.findall(r"test acc ([0-9.]+)", run.stdout)[-1])
    assert len(losses) >= 2 and losses[-1] < losses[0], run.stdout
    assert accuracy > 0.5, run.stdout  # 8 communities: chance is 0.125
