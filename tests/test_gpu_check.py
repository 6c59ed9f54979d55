"""``benchmarks/gpu_check.py --dry-run``: the device check's code runs on the CPU at toy sizes (figures meaningless)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_dry_run_runs_every_section(tmp_path):
    out = tmp_path / "check.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--json", str(out),
                           "--scratch", str(tmp_path / "runs")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "failed sections: none" in done.stdout
    figures = json.loads(out.read_text())
    assert set(figures) == {"device", "tests", "peak", "pretraining", "breakdown", "tiny", "finetuning"}
    assert sum(figures["breakdown"]["seconds_by_kind"].values()) > 0
    assert figures["tests"]["exit_code"] == 0 and "skipped" in figures["tests"]["summary"]  # no CUDA here
    for row in figures["pretraining"]:
        assert set(row["sides"]) == {"transformers", "bvr", "bvr explicit"}
        assert row["sides"]["transformers"]["ratio"] == 1.0
        assert all(side["tokens_per_s"] > 0 for side in row["sides"].values())
    curve = figures["tiny"]["windows"]["cpu 32-true"]
    assert len(curve) == 2 and all(7.0 < x < 8.0 for x in curve)  # ln(2000) = 7.6 at the start
    assert figures["finetuning"]["ratio"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the check would run in full")
def test_gpu_check_without_cuda_says_to_dry_run():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "run with --dry-run" in done.stderr
