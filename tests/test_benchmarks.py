"""Every script in ``benchmarks/`` runs end to end at its tiny setting (``--dry-run`` or a few steps, the test data
folder), so that none rots unseen; the figures printed mean nothing at these sizes, only that they are printed."""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_prepare import write_wiki_corpus

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
FIXTURES = Path(__file__).parent / "fixtures"

COVERED_ELSEWHERE = {
    "gpu_check.py": "tests/test_gpu_check.py",
}
"""Scripts whose tiny run is tested in another file: script -> that file (which must name the script)."""

NUMBER = r"[\d,.]+"
RUNS: dict[str, tuple[list[str], list[str]]] = {
    "collator_overhead.py": (["--dry-run", "--steps", "1", "--collator-calls", "2", "--threads", "1"],
                             [rf"training step \(bvr encoder 2L/64H/2A/FFN 128 \+ NSP, AdamW\): +{NUMBER} ms",
                              *(rf"collator {arm} +: +{NUMBER} ms/batch = +{NUMBER}% of a step"
                                for arm in ("dynamic", r"static \(dupe 10\)", "dynamic whole-word", "dynamic span"))]),
    # Alone, then two at once told of each other (BVR_JOBS reaches them: one thread each); the stranger's scenario
    # differs only by a busy loop started beside, and each phase costs ~10 s of bvr processes starting.
    "contention.py": (["--data-dir", "{data}", "--dry-run", "--steps", "3", "--settings", "bvr --jobs 2"],
                      [r"^  \(bvr: pretraining pretrain-contention-1-\w+: .*; threads \d+ \(.*OpenMP waits: ",
                       rf"^bvr +alone +{NUMBER} +100%$",
                       *(rf"^bvr --jobs 2 +{scenario} +{NUMBER} +{NUMBER}%$" for scenario in ("two at once",
                                                                                            "  together"))]),
    "data_prepare.py": (["--data-dir", "{data}"],
                        [rf"peer: datasets.map \+ group_texts \(2 procs\) +{NUMBER}",
                         rf"bvr data prepare, full-sentences +{NUMBER} .*x$",
                         rf"bvr data prepare, segment-pair\+nsp +{NUMBER} .*x$",
                         *(rf"^{share}% +{NUMBER}" for share in (25, 50, 100))]),
    "data_scale.py": (["--data-dir", "{data}", "--copies", "1"],
                      [rf"^ +1 copies +{NUMBER} MB +{NUMBER} s", r"tokenizer stage on \d+ training documents",
                       r"rank 0 of 8 read .* sequences"]),
    "finetune_parity.py": (["--dry-run"],
                           [r"^SST-2 dev accuracy, 2 layers, hidden 32, 4 heads; 64 training examples",
                            rf"^  bvr finetune: +{NUMBER}, {NUMBER}  mean {NUMBER} \(sd {NUMBER}; \d+ s\)$",
                            rf"^  transformers: +{NUMBER}, {NUMBER}  mean {NUMBER} \(sd {NUMBER}; \d+ s\)$",
                            rf"^  bvr - transformers: [-+]{NUMBER} points; the larger seed spread {NUMBER}: "
                            r"(agree|DIFFER)$"]),
    "finetune_step.py": (["--dry-run", "--steps", "1", "--warmup", "1", "--threads", "1"],
                         [rf"^{kind} +{NUMBER}% +{NUMBER} +{NUMBER} +{NUMBER}x$"
                          for kind in ("classification", "tagging")]),
    "freed_memory.py": (["--dry-run", "--steps", "1", "--threads", "1"],
                        [rf"glibc steady state \(32 MB / 64 MB\) +{NUMBER}", rf"kept \(32 MB / 1 GB\) +{NUMBER}",
                         rf"kept: {NUMBER}x the step rate"]),
    "loop_overhead.py": (["--data-dir", "{data}", "--dry-run", "--steps", "3", "--skip", "1", "--repeats", "1",
                          "--documents", "60"],
                         [rf"bare step: +{NUMBER} tokens/s", rf"real loop: +{NUMBER} tokens/s", rf"ratio: {NUMBER}%"]),
    "plateau_bisect.py": (["--dry-run"],
                          [rf"^\| {row}\. .* \| {NUMBER} \({NUMBER}\) \| {NUMBER} \({NUMBER}\) \| \d+ \|$"
                           for row in range(1, 13)]),
    "pretrain_throughput.py": (["--dry-run", "--steps", "1", "--warmup", "1", "--threads", "1", "--fusion-bounds"],
                               [rf"^bvr +{NUMBER} +{NUMBER}$", rf"^transformers +{NUMBER} +{NUMBER}$",
                                rf"speed-up: {NUMBER}x transformers", rf"achieved: {NUMBER} GFLOP/s",
                                r"its matrix multiplies alone", r"bvr, no dropout/GELU: \d+% of the peak"]),
    "recipe_search.py": (["--data-dir", "{data}", "--dry-run", "--only", "cram"],
                         [r'^\{"recipe": "cram", .*"blimp": .*"probe_sst2": .*"finetune_sst2_control": ']),
    "scoring_throughput.py": (["--data-dir", "{data}", "--sentences", "8", "--rounds", "2", "--threads", "1"],
                              [rf"speed-up: {NUMBER}x the naive loop .*; scores agree to"]),
}
"""Each script's tiny run: its arguments (``{data}``: the test data folder) and patterns that lines of its standard
output must match."""

OWN_PROCESS = {
    "freed_memory.py": "it sets glibc's malloc thresholds, which hold for the rest of the process",
}
"""Scripts that change what a process cannot undo run as ``python SCRIPT``; the others run in this process as
``__main__`` (each run in a fresh interpreter spent 10 to 30 s importing torch, Lightning and MLflow)."""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """A data folder in the real layout: a generated WikiExtractor corpus at the default path, GLUE and BLiMP."""
    root = tmp_path_factory.mktemp("data")
    write_wiki_corpus(root, documents=60)
    (root / "corpus" / "wiki").rename(root / "corpus" / "enwiki-2021-extract")
    for name in ("glue", "blimp"):
        shutil.copytree(FIXTURES / name, root / name)
    return root


def run_benchmark(script: str, args: list[str], cwd: Path) -> tuple[int, str, str]:
    """``python benchmarks/SCRIPT ARGS`` in ``cwd``, on this checkout's bvr, one thread: exit status, standard
    output, standard error."""
    if script in OWN_PROCESS:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        done = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout, done.stderr
    return _run_here(script, args, cwd)


def _run_here(script: str, args: list[str], cwd: Path) -> tuple[int, str, str]:
    """The script as ``__main__`` in this process, as ``python`` would run it: its folder first on ``sys.path``,
    ``sys.argv`` its arguments; the working folder, environment, ``sys.path`` and torch's thread count put back."""
    import torch

    saved = (os.getcwd(), dict(os.environ), list(sys.path), list(sys.argv), torch.get_num_threads())
    out, err = io.StringIO(), io.StringIO()
    status = 0
    try:
        os.chdir(cwd)
        sys.path.insert(0, str(BENCHMARKS))
        sys.argv = [str(BENCHMARKS / script), *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
            except SystemExit as stop:
                if stop.code not in (None, 0):
                    status = stop.code if isinstance(stop.code, int) else 1
                    print(stop.code, file=sys.stderr)
    finally:
        cwd_was, env, path, argv, threads = saved
        os.chdir(cwd_was)
        os.environ.clear()
        os.environ.update(env)
        sys.path[:], sys.argv[:] = path, argv
        torch.set_num_threads(threads)
    return status, out.getvalue(), err.getvalue()


def test_every_benchmark_has_a_tiny_run_tested():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")}
    untested = scripts - set(RUNS) - set(COVERED_ELSEWHERE)
    assert not untested, f"give these a tiny run in RUNS (or name their test in COVERED_ELSEWHERE): {sorted(untested)}"
    assert set(RUNS) <= scripts, f"RUNS names scripts that are gone: {sorted(set(RUNS) - scripts)}"
    assert set(OWN_PROCESS) <= set(RUNS), f"OWN_PROCESS names scripts without a run: {set(OWN_PROCESS) - set(RUNS)}"
    for script, test_file in COVERED_ELSEWHERE.items():
        if script in scripts:
            assert script in (ROOT / test_file).read_text(), f"{test_file} does not run {script}"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(RUNS))
def test_benchmark_runs_at_its_tiny_setting(script, data_dir, tmp_path):
    args, patterns = RUNS[script]
    status, stdout, stderr = run_benchmark(script, [arg.format(data=data_dir) for arg in args], tmp_path)
    assert status == 0, stdout[-3000:] + stderr[-3000:]
    lines = stdout.splitlines()
    for pattern in patterns:
        assert any(re.search(pattern, line) for line in lines), f"no line matches {pattern!r} in:\n{stdout}"

