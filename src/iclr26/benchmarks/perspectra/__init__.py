"""PERSPECTRA (ICLR 2026, arXiv 2602.08716): the pluralism benchmark's loader, tasks and metrics."""
from .dataset import Opinion, SchemaError, Topic, load, parse, to_records
from .scoring import LMChooser, chat_prompt, score_options
from .tasks import (build_counting_task, build_matching_task, build_polarity_task, counting_metrics, evaluate,
                    is_concessive, matching_metrics, nie_score, parse_choice, parse_count, parse_polarity,
                    polarity_metrics)

__all__ = ["load", "parse", "to_records", "Topic", "Opinion", "SchemaError",
           "build_counting_task", "build_matching_task", "build_polarity_task", "evaluate",
           "nie_score", "counting_metrics", "matching_metrics", "polarity_metrics",
           "parse_count", "parse_choice", "parse_polarity", "is_concessive",
           "score_options", "LMChooser", "chat_prompt"]
