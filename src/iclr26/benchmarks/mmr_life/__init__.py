"""MMR-Life (ICLR 2026, arXiv 2603.02024): the benchmark's answer extraction, voting, per-type tables,
type-correlation clustering, and a text-rendered procedural mini benchmark in the same schema."""
from .evaluation import (CHANCE, HUMAN_ACCURACY, LETTERS, OFFICIAL_SAMPLING, REASONING_TYPES, SYSTEM_PROMPTS,
                         TYPE_TASK_MAP, TypeCorrelation, TypeRow, best_of_n, chat_prompt, extract_answer,
                         extract_answers, majority_vote, per_type_accuracy, render_user_turn, sample_accuracy,
                         score_item, type_correlation)
from .minibench import GENERATORS, make_items

__all__ = ["extract_answer", "extract_answers", "majority_vote", "best_of_n", "score_item", "per_type_accuracy",
           "TypeRow", "type_correlation", "TypeCorrelation", "sample_accuracy", "chat_prompt", "render_user_turn",
           "make_items", "GENERATORS", "TYPE_TASK_MAP", "REASONING_TYPES", "LETTERS", "CHANCE", "HUMAN_ACCURACY",
           "OFFICIAL_SAMPLING", "SYSTEM_PROMPTS"]
