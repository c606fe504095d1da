"""Tasks: KernelBench-format problems (``class Model``, ``get_inputs``, ``get_init_inputs``).

Entry points: :func:`load_task` for one file, :func:`iter_tasks` for a directory.
"""

from .task import REQUIRED_NAMES, Task, TaskError, check_task_source, load_task, validate_task
from .loaders import iter_kernelbench, iter_tasks

__all__ = ["REQUIRED_NAMES", "Task", "TaskError", "check_task_source", "load_task", "validate_task",
           "iter_kernelbench", "iter_tasks"]
