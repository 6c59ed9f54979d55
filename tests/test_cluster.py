"""Real parts past one machine: an ablation submitted to SLURM (``bvr ablate --launcher slurm``, one job per unit
through submitit), logging to an MLflow tracking server on PostgreSQL, both from ``scripts/cluster.sh`` (skipped,
with the reason, where the cluster is not up)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.test_prepare import write_wiki_corpus

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_DIR = Path(os.environ.get("BVR_CLUSTER_DIR", "/tmp/bvr-cluster"))
MLFLOW = f"http://127.0.0.1:{os.environ.get('BVR_MLFLOW_PORT', '5055')}"


def _cluster_up() -> str | None:
    """Why the cluster cannot be used here, or None when it answers."""
    if shutil.which("sbatch") is None:
        return "no sbatch: apt-get install slurm-wlm munge postgresql, then bash scripts/cluster.sh up"
    conf = CLUSTER_DIR / "slurm" / "slurm.conf"
    if not conf.is_file():
        return f"no {conf}: bash scripts/cluster.sh up"
    try:
        import psycopg  # noqa: F401
        import submitit  # noqa: F401
    except ImportError:
        return 'the cluster extra is not installed: pip install -e ".[cluster]"'
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], env={**os.environ, "SLURM_CONF": str(conf)},
                          capture_output=True, text=True)
    if done.returncode or not done.stdout.strip():
        return f"SLURM does not answer ({done.stderr.strip()[:200]}): bash scripts/cluster.sh up"
    try:
        urllib.request.urlopen(f"{MLFLOW}/health", timeout=5)
    except OSError as err:
        return f"no MLflow server at {MLFLOW} ({err}): bash scripts/cluster.sh up"
    return None


@pytest.fixture(scope="module")
def cluster(monkeypatch_module) -> Path:
    why = _cluster_up()
    if why is not None:
        pytest.skip(why)
    monkeypatch_module.setenv("SLURM_CONF", str(CLUSTER_DIR / "slurm" / "slurm.conf"))
    monkeypatch_module.setenv("MLFLOW_TRACKING_URI", MLFLOW)
    return CLUSTER_DIR


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _wait_for_jobs(job_ids: list[str], seconds: float) -> None:
    """Until none of ``job_ids`` is queued or running (slurmctld's queue; no accounting here)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        queue = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(job_ids)], capture_output=True,
                               text=True).stdout.split()
        if not set(queue) & set(job_ids):
            return
        time.sleep(2)
    raise AssertionError(f"SLURM jobs {job_ids} still queued after {seconds} s")


@pytest.mark.slow
def test_an_ablation_submitted_to_slurm_runs_its_units_as_jobs_in_order_into_one_parent_run(cluster, tmp_path):
    from mlflow import MlflowClient

    from bvr.ablation.manifest import Manifest
    from bvr.ops.launch.launch import read_jobs
    from tests.test_ablate import FIXTURES, bvr_env
    from tests.test_launch import SMALL

    data = write_wiki_corpus(tmp_path / "data", documents=60)
    shutil.copytree(FIXTURES / "glue", data / "glue")
    name = f"launch-{uuid.uuid4().hex[:8]}"  # the server outlives the test: an experiment of its own
    (tmp_path / f"{name}.yaml").write_text(SMALL)
    command = [sys.executable, "-m", "bvr.cli", "ablate", f"{name}.yaml", "--data-dir", str(data), "--launcher",
               "slurm", *(arg for kind in ("data", "pretrain", "evaluate")
                          for arg in ("--set", f"launcher.{kind}.mem_gb=2"))]
    env = {**bvr_env(), "MLFLOW_TRACKING_URI": MLFLOW, "SLURM_CONF": os.environ["SLURM_CONF"]}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (folder,) = (tmp_path / "outputs" / "ablations").glob(f"{name}-default-*")
    jobs = read_jobs(folder)
    assert list(jobs) == ["corpus", "tokenizer:bert", "data:static", "data:dynamic", "pretrain:static",
                          "pretrain:dynamic", "finetune:static:sst2", "finetune:dynamic:sst2", "report"]
    assert f"report: submitted as SLURM job {jobs['report']['job']}" in done.stdout
    shown = subprocess.run(["scontrol", "show", "job", "-o", jobs["finetune:static:sst2"]["job"]],
                           capture_output=True, text=True).stdout
    assert f"Dependency=afterok:{jobs['pretrain:static']['job']}" in shown, shown  # the plan's graph, in SLURM
    _wait_for_jobs([entry["job"] for entry in jobs.values()], 400)

    manifest = Manifest.load(folder / "manifest.json")
    assert manifest.complete, [(r.label, r.status, r.error) for r in manifest.records()]
    assert (tmp_path / "reports" / name / "report.html").is_file()
    client = MlflowClient(MLFLOW)
    runs = client.search_runs([client.get_experiment_by_name(name).experiment_id], max_results=1000)
    names = [run.info.run_name for run in runs]
    assert len(names) == len(set(names)) and {run.info.status for run in runs} == {"FINISHED"}, names
    parents = [run.info.run_name for run in runs if run.data.tags.get("bvr.stage") == "ablation"]
    assert parents == [f"{name} (default)"]
    status = subprocess.run([sys.executable, "-m", "bvr.cli", "status", name], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0 and "SLURM jobs" in status.stdout and "COMPLETED" in status.stdout, status.stdout

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and f"ablation {name}: every unit is finished; nothing submitted" in again.stdout
