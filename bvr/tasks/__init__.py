"""Fine-tuning tasks: the registry of task specs, GLUE readers and metrics (NER and SQuAD have their own modules)."""

from bvr.tasks.registry import TASKS, SplitSpec, TaskSpec, get_task

__all__ = ["TASKS", "SplitSpec", "TaskSpec", "get_task"]
