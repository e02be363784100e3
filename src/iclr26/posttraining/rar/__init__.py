"""RaR, Rubrics as Rewards (arXiv:2507.17746): rubric rewards for GRPO (explicit and implicit aggregation)."""
from .environment import RubricEnvironment, SimulatedJudge, grpo_bandit, make_environment
from .reward import (CATEGORY_WEIGHTS, Rubric, RubricItem, RubricReward, TransformersLikertJudge,
                     TransformersYesNoJudge, as_rubric, criterion_prompt, explicit_reward, likert_prompt,
                     normalize_likert, rubric_list_string)

__all__ = ["CATEGORY_WEIGHTS", "Rubric", "RubricItem", "RubricReward", "TransformersLikertJudge",
           "TransformersYesNoJudge", "as_rubric", "criterion_prompt", "explicit_reward", "likert_prompt",
           "normalize_likert", "rubric_list_string",
           "RubricEnvironment", "SimulatedJudge", "grpo_bandit", "make_environment"]
