from .engines import ENGINES, GameEngine, LangtonAntEngine, LifeEngine, MazeEngine, SnakeEngine, SokobanEngine
from .generator import (TEMPLATES, Code2LogicGenerator, TaskTemplate, extract_choice, generator_for, is_correct,
                        verifiable_reward)

__all__ = ["GameEngine", "SokobanEngine", "MazeEngine", "LangtonAntEngine", "LifeEngine", "SnakeEngine", "ENGINES",
           "TaskTemplate", "Code2LogicGenerator", "TEMPLATES", "generator_for", "extract_choice", "is_correct",
           "verifiable_reward"]
