"""Bad input to the ablations' fairness settings: ``training.tokens_per_batch`` too small or not positive is one
line naming the key and what to write, exit status 2."""

from __future__ import annotations

import sys

import pytest

from bvr import cli


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["bvr", *args])
    with pytest.raises(SystemExit) as info:
        cli.main()
    return info.value.code, capsys.readouterr().err


def test_a_token_budget_that_cannot_hold_a_sequence_is_one_line(monkeypatch, capsys):
    code, err = run_main(monkeypatch, capsys, "config", "show", "--set", "training.tokens_per_batch=200",
                         "--set", "training.grad_accum=2")
    assert code == 2
    assert err.strip() == ("error: --set training.tokens_per_batch=200: training.tokens_per_batch: 200 tokens over "
                           "grad_accum 2 micro-batches cannot hold one sequence of data.max_length 128: use at "
                           "least 256")


def test_a_token_budget_must_be_positive(monkeypatch, capsys):
    code, err = run_main(monkeypatch, capsys, "config", "show", "--set", "training.tokens_per_batch=0")
    assert code == 2
    assert err.strip() == ("error: --set training.tokens_per_batch=0: training.tokens_per_batch: must be positive "
                           "(or null for batch_size sequences per step)")
