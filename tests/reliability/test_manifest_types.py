"""A damaged manifest that heals (issue 53, item 5): a manifest whose ``pretrain`` list was renamed read as one with
no pretraining, so `bvr status` said "complete" and `bvr ablate` failed every pretraining unit with StopIteration,
again on the advised rerun; ``"context": "oops"`` or ``"overrides": 7`` gave tracebacks. Every field is now checked
by type when read: a manifest that cannot be used is refused by `bvr status` and set aside by `bvr ablate`, a unit
entry of the wrong type or a planned unit not listed is reset to missing, each said in one line. The SLURM launcher's
``jobs.json`` is held to its layout too, and SLURM's commands missing here are one line, not a traceback."""

from __future__ import annotations

import json

import pytest

from bvr.ablation.manifest import Manifest
from bvr.errors import BvrError
from bvr.ops.launch.launch import JOBS_FILE, recorded_jobs
from bvr.ops.launch.slurm import check_store_for_slurm, slurm_states
from tests.reliability.conftest import error_line
from tests.reliability.test_manifest_advice import damaged  # noqa: F401 - the fixture: a manifest of missing units

ABLATE = ("ablate", "exp.yaml", "--data-dir", "data")
NO_SQUEUE = ("squeue, a SLURM command, is not on PATH: SLURM is not installed here, or not on PATH. run this on the "
             "cluster's login node, or put SLURM's commands on PATH (`module load slurm`, say)")


def _edit(path, change) -> None:
    """Rewrite the manifest JSON at ``path`` with ``change`` (a function of the parsed object) applied."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _rename_pretrain(data: dict) -> None:
    data["pretrained"] = data.pop("pretrain")


@pytest.mark.parametrize(("change", "problem"), [
    (_rename_pretrain, "missing key 'pretrain'"),
    (lambda data: data.update(context="oops"), """'context' must be an object, got "oops\""""),
    (lambda data: data.update(overrides=7), "'overrides' must be a list of strings, got 7"),
    (lambda data: data["context"].update(wall_seconds="long"), """context: 'wall_seconds' must be a number, got \
"long\""""),
])
def test_a_manifest_field_missing_or_of_the_wrong_type_is_refused_then_set_aside(bvr, damaged, tmp_path, change,  # noqa: F811
                                                                                problem):
    path = damaged.manifest_path
    _edit(path, change)
    before = path.read_text()
    code, out, err = bvr("status", "exp")
    assert code == 2 and "complete" not in out
    assert error_line(err) == (f"{path}: manifest of ablation 'exp': {problem}. run `bvr ablate exp.yaml --data-dir "
                               f"{tmp_path / 'data'}`: it resets a damaged unit to missing (a damaged manifest: sets "
                               "it aside and starts a new one) and runs what is missing, reusing the finished units")

    code, out, err = bvr(*ABLATE)
    assert code == 0, err
    assert f"{path}: the manifest could not be used ({problem}); set aside as manifest.json.damaged and started " \
           "again from the plan (finished units are reused)" in out.splitlines()
    assert path.with_name("manifest.json.damaged").read_text() == before
    assert Manifest.load(path).complete and len(Manifest.load(path).pretrain) == 2
    code, out, err = bvr("status", "exp")
    assert code == 0 and "complete; the report: " in out, err


def test_a_unit_entry_of_the_wrong_type_is_reset_to_missing(bvr, damaged):  # noqa: F811
    path = damaged.manifest_path
    _edit(path, lambda data: data["finetune"][0].update(status=5))
    code, _, err = bvr("status", "exp")
    assert code == 2 and "finetune[0]: unit 'status' must be one of \"missing\", \"done\", \"failed\", got 5. " \
                         "run `bvr ablate exp.yaml" in error_line(err)
    code, out, err = bvr(*ABLATE)
    assert code == 0, err
    assert f"{path}: 1 damaged unit entry (finetune[0] ('status' must be one of \"missing\", \"done\", \"failed\", " \
           "got 5)) reset to missing; their units run again (finished work is reused)" in out.splitlines()
    assert Manifest.load(path).complete


@pytest.mark.parametrize(("sections", "gaps"), [
    (("pretrain",), ["the manifest's 'pretrain' lacks 2 planned units"]),
    (("pretrain", "evaluations", "finetune"), ["the manifest lists no units"]),
])
def test_a_manifest_that_lists_no_units_is_never_complete_and_bvr_ablate_adds_them(bvr, damaged, sections, gaps):  # noqa: F811
    path = damaged.manifest_path
    _edit(path, lambda data: data.update(dict.fromkeys(sections, [])))
    _edit(path, lambda data: [record.update(status="done") for key in ("evaluations", "finetune")
                              for record in data[key]])
    code, out, err = bvr("status", "exp")
    assert code == 0, err
    assert "complete" not in out and out.rstrip().splitlines()[-1].startswith("next: bvr ablate exp.yaml")
    assert [line for line in out.splitlines() if line.endswith("as missing")] == [
        f"{gap}: bvr ablate adds them, as missing" for gap in gaps]

    code, out, err = bvr(*ABLATE)
    assert code == 0, err
    count = {1: 2, 3: 11}[len(sections)]  # two pretraining runs; with three probes and six fine-tunings
    listed = "; ".join(f"{key}: {n} planned unit{'s' * (n != 1)} not listed"
                       for key, n in (("pretrain", 2), ("evaluations", 3), ("finetune", 6)) if key in sections)
    assert f"{path}: {count} unlisted unit entries ({listed}) reset to missing; their units run again (finished " \
           "work is reused)" in out.splitlines()
    assert Manifest.load(path).complete
    assert "complete; the report: " in bvr("status", "exp")[1]


@pytest.mark.parametrize(("content", "problem"), [
    ('"12345"', 'expected an object of unit ids, got "12345"'),
    ('{"corpus": "12345"}', """'corpus' must be an object of strings with its "job" id, got "12345\""""),
    ('{"corpus": {"log": "slurm/1.out"}}', """'corpus' must be an object of strings with its "job" id, got \
{"log": "slurm/1.out"}"""),
    ('{"corpus": {"job": 12345}}', """'corpus' must be an object of strings with its "job" id, got {"job": 12345}"""),
    ('{"lunch": {"job": "12345"}}', "'lunch' is not a unit (blimp, corpus, data, finetune, pretrain, probe, report, "
                                    "tokenizer, with a name and task)"),
])
def test_a_damaged_record_of_slurm_jobs_is_one_line_and_set_aside(bvr, damaged, content, problem):  # noqa: F811
    jobs = damaged.folder / JOBS_FILE
    jobs.write_text(content)
    code, out, err = bvr("status", "exp")
    assert code == 0, err
    assert f"SLURM jobs not shown: {jobs}: the record of SLURM jobs is damaged: {problem}. run the bvr ablate " \
           "command with --launcher slurm again: it sets the record aside as jobs.json.damaged and submits every " \
           "unit neither finished nor queued" in out.splitlines()
    assert out.rstrip().splitlines()[-1].endswith("--launcher slurm (finished units are reused)")

    assert recorded_jobs(damaged.folder) == ({}, f"{jobs}: the record of SLURM jobs is damaged: {problem}; set aside "
                                                 "as jobs.json.damaged: every unit neither finished nor queued is "
                                                 "submitted (finished units are reused)")
    assert jobs.with_name("jobs.json.damaged").read_text() == content and not jobs.exists()


def test_slurm_commands_missing_here_are_one_line(bvr, damaged, tmp_path, monkeypatch):  # noqa: F811
    jobs = {"corpus": {"job": "12345", "log": "slurm/12345.out"}}
    (damaged.folder / JOBS_FILE).write_text(json.dumps(jobs))
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    code, out, err = bvr("status", "exp")
    assert code == 0, err
    assert f"SLURM jobs not shown: {NO_SQUEUE}" in out.splitlines()
    assert recorded_jobs(damaged.folder) == (jobs, None)
    with pytest.raises(BvrError) as raised:
        slurm_states(["12345"])
    assert raised.value.one_line() == NO_SQUEUE
    with pytest.raises(BvrError, match=r"^sinfo, a SLURM command, is not on PATH"):
        check_store_for_slurm("sqlite:///mlflow.db")
