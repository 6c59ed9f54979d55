"""A launcher's variables left in a shell (issue 35, item 2): `RANK=1` without a launcher made `bvr data prepare`
wait forever for a rank 0 that nothing started. Such an environment is refused in one line naming the variables,
and the one wait on another rank left, for rank 0's stage, has a bound that names what it waits for."""

from __future__ import annotations

import time

import pytest

from tests.reliability.conftest import error_line, start_bvr
from tests.test_prepare import write_wiki_corpus

LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")
"""What torchrun, Lightning's DDP launcher and SLURM's srun set: cleared, then each case sets its own."""

PREPARE = ["--set", "corpus.path=corpus/wiki", "--set", "tokenizer.vocab_size=400", "--set", "data.max_length=64"]
"""A corpus small enough to prepare in seconds."""


def _prepare(tmp_path, monkeypatch, env: dict[str, str]) -> tuple[int, str, float]:
    """`bvr data prepare` in a second process under ``env`` (a hang fails the test after a minute)."""
    for key in LAUNCHER_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    data_dir = tmp_path / "data"
    if not data_dir.is_dir():
        write_wiki_corpus(data_dir, documents=10)
    start = time.monotonic()
    process = start_bvr("data", "prepare", "--data-dir", data_dir, "--output-dir", tmp_path / "out", *PREPARE,
                        cwd=tmp_path)
    try:
        _, err = process.communicate(timeout=60)
    except BaseException:
        process.kill()
        process.communicate()
        raise
    return process.returncode, err, time.monotonic() - start


@pytest.mark.parametrize(("env", "problem"), [
    ({"RANK": "1"}, "a rank other than 0 without WORLD_SIZE would wait for a rank 0 that no launcher started"),
    ({"LOCAL_RANK": "1"}, "a rank other than 0 without WORLD_SIZE would wait for a rank 0 that no launcher started"),
    ({"RANK": "1", "WORLD_SIZE": "1"},
     "a rank other than 0 with WORLD_SIZE 1 would wait for a rank 0 that no launcher started"),
    ({"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "2"},
     "a rank at or above WORLD_SIZE, which no launcher starts, would wait for a rank 0 it may not have"),
])
def test_a_stray_rank_is_refused_in_one_line_and_unsetting_it_as_advised_works(bvr, tmp_path, monkeypatch, env,
                                                                                problem):
    code, err, seconds = _prepare(tmp_path, monkeypatch, env)
    shown = " ".join(f"{key}={value}" for key, value in env.items())
    assert code == 2, err
    assert error_line(err) == (f"environment: {shown}: {problem}. if they are left over from a torchrun, DDP or SLURM "
                               f"session, run `unset {' '.join(env)}` to run bvr alone; to run distributed, start "
                               "bvr through torchrun or srun, which set them all")
    assert seconds < 30  # the interpreter's start; the check itself comes before any work
    assert not (tmp_path / "out").exists()

    for key in env:  # the advice, as a shell's `unset` does it
        monkeypatch.delenv(key)
    code, _, err = bvr("data", "prepare", "--data-dir", tmp_path / "data", "--output-dir", tmp_path / "out", *PREPARE)
    assert code == 0, err


def test_a_rank_that_rank_zero_never_serves_stops_waiting_naming_the_marker_and_rank_zero(tmp_path, monkeypatch):
    """RANK=1 of WORLD_SIZE=2 is a launcher's environment, so it waits, but no rank 0 builds the corpus here."""
    monkeypatch.setenv("BVR_RANK_WAIT", "2")
    code, err, seconds = _prepare(tmp_path, monkeypatch, {"RANK": "1", "WORLD_SIZE": "2"})
    assert code == 2, err
    notice, error = err.strip("\n").splitlines()
    corpus = tmp_path / "out" / "cache" / notice.split("/cache/")[1].split(" ")[0]  # never made: rank 1 waits
    assert corpus.name.startswith("corpus-") and not corpus.exists()
    assert notice == (f"rank 1: waiting for rank 0 to build {corpus} (its DONE marker; up to 2 s, BVR_RANK_WAIT sets "
                      "how long)")
    assert error == (f"error: {corpus}: rank 1 waited 2 s for rank 0 to build this stage ({corpus / 'DONE'} did not "
                     "appear). check that rank 0 runs and shares this file system; BVR_RANK_WAIT=SECONDS waits longer")
    assert seconds < 30
