"""What an ablation's numbers were measured on: the probe the runner writes into the manifest's context."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path
from typing import Any


def hardware() -> dict[str, Any]:
    """The platform, Python and torch versions, CPU model and count, and GPU model and count."""
    import torch

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "cpu": cpu, "cpu_count": os.cpu_count(), "gpu": torch.cuda.get_device_name(0) if gpus else None,
            "gpu_count": gpus}
