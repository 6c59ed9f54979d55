"""bvr.threads: threads from the CPUs a process may use, shared among the jobs told of, and OpenMP waits that
sleep, so that two bvr processes on the same cores do not spin each other to a crawl."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bvr.errors import BvrError
from bvr.threads import Usable, cgroup_quota, jobs_from, quiet_waits, thread_budget, usable_cpus


def cgroup_v2(tmp_path: Path, cpu_max: str) -> Path:
    (tmp_path / "cpu.max").write_text(cpu_max)
    return tmp_path


def cgroup_v1(tmp_path: Path, quota: str, period: str = "100000") -> Path:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(quota + "\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(period + "\n")
    return tmp_path


@pytest.mark.parametrize(("text", "cpus"), [("max 100000\n", None), ("200000 100000\n", 2.0),
                                             ("50000 100000", 0.5), ("", None), ("lots 100000", None)])
def test_cgroup_v2_quota(tmp_path, text, cpus):
    assert cgroup_quota(cgroup_v2(tmp_path, text)) == cpus


@pytest.mark.parametrize(("quota", "cpus"), [("-1", None), ("150000", 1.5), ("0", None)])
def test_cgroup_v1_quota(tmp_path, quota, cpus):
    assert cgroup_quota(cgroup_v1(tmp_path, quota)) == cpus


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert cgroup_quota(tmp_path / "missing") is None


def test_a_quota_below_the_affinity_caps_the_cpus_rounded_up(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    half = usable_cpus(cgroup_v2(tmp_path, "50000 100000"))  # half a CPU still gets one thread
    assert (half.cpus, half.affinity, half.quota) == (1, affinity, 0.5)
    assert half.limit == ("cgroup quota 0.5 CPUs" if affinity > 1 else "affinity")
    (tmp_path / "v1").mkdir()
    generous = usable_cpus(cgroup_v1(tmp_path / "v1", f"{(affinity + 8) * 100000}"))  # more than the affinity
    assert generous.cpus == affinity and generous.limit == "affinity"


def test_the_budget_divides_the_usable_cpus_among_the_jobs_and_keeps_one(tmp_path):
    root = cgroup_v2(tmp_path, "400000 100000")  # 4 CPUs of quota: the affinity decides below 4
    usable = usable_cpus(root).cpus
    assert thread_budget(0, 1, root=root, environ={}).threads == usable
    assert thread_budget(0, 2, root=root, environ={}).threads == max(1, usable // 2)
    assert thread_budget(0, 64, root=root, environ={}).threads == 1
    assert thread_budget(0, 2, root=root, environ={"OMP_NUM_THREADS": "3"}).threads == 3  # the user's count
    assert thread_budget(0, None, root=root, environ={"BVR_JOBS": "64"}).threads == 1  # from the environment
    asked = thread_budget(3, 2, root=root, environ={})  # training.threads wins over the division
    assert asked.threads == 3 and asked.line().startswith("threads 3 (training.threads; ")


def test_the_line_and_tags_say_what_decided(tmp_path):
    budget = thread_budget(0, 2, root=cgroup_v2(tmp_path, "100000 100000"), environ={"OMP_WAIT_POLICY": "PASSIVE"})
    limit = "cgroup quota 1 CPUs" if len(os.sched_getaffinity(0)) > 1 else "affinity"
    assert budget.threads == 1
    assert budget.line() == (f"threads 1 (1 usable CPU ({limit}) shared by 2 jobs; OpenMP waits: "
                             "OMP_WAIT_POLICY=PASSIVE)")
    assert budget.tags() == {"bvr.threads": "1", "bvr.threads_budget": budget.line()}


@pytest.mark.parametrize("raw", ["0", "-2", "two", "1.5"])
def test_a_bad_jobs_variable_is_one_line_naming_it(raw):
    with pytest.raises(BvrError, match=f"BVR_JOBS='{raw}' is not a number of jobs"):
        jobs_from({"BVR_JOBS": raw})


def test_waits_are_quieted_unless_the_user_set_them():
    env: dict[str, str] = {}
    assert quiet_waits(env) is True and env == {"OMP_WAIT_POLICY": "PASSIVE"}
    for name, value in (("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "1000"), ("KMP_BLOCKTIME", "0"),
                        ("BVR_JOBS", "1")):  # the last: `bvr --jobs 1`, alone on the machine
        theirs = {name: value}
        assert quiet_waits(theirs) is False and theirs == {name: value}


def test_usable_is_plain_data():
    assert Usable(2, 4, 2.0).limit == "cgroup quota 2 CPUs"


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    from bvr import cli

    monkeypatch.setattr("sys.argv", ["bvr", *args])
    try:
        cli.main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_a_bad_jobs_variable_stops_the_cli_before_any_work(monkeypatch, capsys):
    monkeypatch.setenv("BVR_JOBS", "many")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # restored afterwards: the CLI sets it in this process
    code, _, err = run_cli(monkeypatch, capsys, "config", "show")
    assert code == 2
    assert "BVR_JOBS='many' is not a number of jobs: give a whole number of at least 1" in err


def test_jobs_option_sets_the_variable_for_the_processes_bvr_starts(monkeypatch, capsys):
    monkeypatch.setenv("BVR_JOBS", "1")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    code, _, _ = run_cli(monkeypatch, capsys, "--jobs", "3", "config", "show")
    assert code == 0 and os.environ["BVR_JOBS"] == "3"
    code, _, err = run_cli(monkeypatch, capsys, "--jobs", "0", "config", "show")
    assert code == 2 and "Invalid value for '--jobs': Input should be greater than or equal to 1" in err
