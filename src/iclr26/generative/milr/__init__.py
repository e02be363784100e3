"""MILR: test-time latent reasoning over unified text and image latents ("MILR: Improving Multimodal
Image Generation via Test-Time Latent Reasoning", ICLR 2026; arXiv:2509.22761)."""
from .reasoner import LatentReasoner, MILRResult, UnifiedLatentModel, best_of_n, n_optimised, prefix_log_prob, reinforce_step
from .scenes import SceneSpec, TinyUnifiedTransformer, check_scenes, scene_reward, train_scene_model

__all__ = ["LatentReasoner", "MILRResult", "UnifiedLatentModel", "best_of_n", "n_optimised", "prefix_log_prob",
           "reinforce_step", "SceneSpec", "TinyUnifiedTransformer", "check_scenes", "scene_reward",
           "train_scene_model"]
