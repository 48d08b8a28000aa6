"""Episodic evaluation with cross-episode batching; see docs/episodes.md.

Import cost is small: torch, numpy and gymnasium load only when a built-in environment or
policy is made.
"""

from lmmbench.episodes.custom import SimplePolicy, check_fit
from lmmbench.episodes.protocols import (
    ActItem,
    Env,
    EnvSuite,
    EpisodeKey,
    EpisodeMemory,
    EpisodeResult,
    Policy,
    SlotState,
    episode_seed,
)
from lmmbench.episodes.scheduler import EpisodeScheduler, RunTotals, success_of
from lmmbench.episodes.suites import POLICIES, SUITES, PolicySettings, make_policy, resolve_suite

__all__ = [
    "POLICIES",
    "SUITES",
    "ActItem",
    "Env",
    "EnvSuite",
    "EpisodeKey",
    "EpisodeMemory",
    "EpisodeResult",
    "EpisodeScheduler",
    "Policy",
    "PolicySettings",
    "RunTotals",
    "SimplePolicy",
    "SlotState",
    "check_fit",
    "episode_seed",
    "make_policy",
    "resolve_suite",
    "success_of",
]
