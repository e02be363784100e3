"""MILR: test-time latent reasoning over unified text and image latents ("MILR: Improving Multimodal
Image Generation via Test-Time Latent Reasoning", ICLR 2026; arXiv:2509.22761)."""
from .reasoner import (LatentReasoner, MILRResult, RowAdam, UnifiedLatentModel, best_of_n, n_optimised, policy_gradient,
                       prefix_log_prob, reinforce_step)
from .scenes import DetectorCritic, SceneSpec, TinyUnifiedTransformer, check_scenes, scene_reward, train_scene_model

__all__ = ["DetectorCritic", "LatentReasoner", "MILRResult", "RowAdam", "SceneSpec", "TinyUnifiedTransformer",
           "UnifiedLatentModel", "best_of_n", "check_scenes", "n_optimised", "policy_gradient", "prefix_log_prob",
           "reinforce_step", "scene_reward", "train_scene_model"]
