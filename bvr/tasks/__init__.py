"""Fine-tuning tasks: the registry of task specs (:mod:`bvr.tasks.registry`), readers by file format
(:mod:`bvr.tasks.readers`), task kinds (:mod:`bvr.tasks.kinds`), metrics, and the fine-tuning run."""

from bvr.tasks.registry import TASKS, SplitSpec, TaskSpec, get_task

__all__ = ["TASKS", "SplitSpec", "TaskSpec", "get_task"]
