"""Many-for-Many: unified multi-task video generation through a light condition adapter (arXiv:2506.01758)."""
from .adapter import (TASKS, MfMConditionAdapter, MfMVideoTransformer, bind_condition, task_condition, task_mask,
                      unified_condition)
from .training import flow_matching_loss, sample_task, train_multitask

__all__ = ["TASKS", "MfMConditionAdapter", "MfMVideoTransformer", "bind_condition", "flow_matching_loss",
           "sample_task", "task_condition", "task_mask", "train_multitask", "unified_condition"]
