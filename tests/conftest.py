"""Shared test set-up: offline, quiet, small."""

from __future__ import annotations

import os

import pytest

from bvr.threads import quiet_waits

# Tests never reach the network: no hub downloads, no telemetry.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# Under pytest-xdist (``-n``), the workers share the cores: one torch thread each, and the same for the processes a
# test starts, or two workers on two cores would each spin two threads against the other. Whatever the thread count,
# OpenMP's workers sleep while they wait, as under the CLI (bvr.threads), for this process and those it starts.
quiet_waits()
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    import torch

    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of tiny models (``pytestmark = pytest.mark.usefixtures("one_thread")``): other
    jobs share the machine, and a tiny model gains nothing from a second thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
