"""Strict Subgoal Execution with Frontier Experience Replay (arXiv:2506.21039)."""
from .agent import FlatHER, GoalQ, GridMaze, SSEAgent
from .planner import FailureAwareGraphPlanner
from .replay import FrontierReplayBuffer

__all__ = ["SSEAgent", "FlatHER", "GoalQ", "GridMaze", "FailureAwareGraphPlanner", "FrontierReplayBuffer"]
