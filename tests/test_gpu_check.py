"""``benchmarks/gpu_check.py --dry-run``: the device check's code runs on the CPU at toy sizes (figures meaningless)."""

from __future__ import annotations

import importlib.util
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
def test_gpu_check_without_cuda_says_to_dry_run(capsys, monkeypatch):
    # In this process (a fresh interpreter spent ten seconds importing to print one line); its folder first on
    # sys.path, as `python benchmarks/gpu_check.py` has it.
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_check", gpu_check)  # its dataclasses look their module up there
    spec.loader.exec_module(gpu_check)
    assert gpu_check.main([]) == 2
    assert "run with --dry-run" in capsys.readouterr().err
