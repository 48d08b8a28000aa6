"""``chat``: multi-turn conversations with a scripted user; a tiny LLM is the policy.

Task ``i`` is a topic; ``reset(seed)`` draws the keyword the user asks about and how many turns
the user is willing to take (2 to 4). Each ``step(reply)`` appends the assistant's reply and the
user's next message; the conversation ends early, with ``success``, when a reply contains the
keyword, or after the last turn without it. The policy (``tiny-llm`` by default) generates the
reply of every live conversation in ONE ``BatchEngine.generate_many`` call per tick (batched
planning), greedy, so each transcript must equal the one a serial run produces; its trace is
the generated token ids per turn.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from lmmbench.episodes.protocols import ActItem, EpisodeKey, EpisodeMemory

__all__ = ["ChatPolicy", "ScriptedUserEnv"]

TOPICS = ("the weather", "a recipe", "a train timetable", "a book", "a garden", "a museum", "a song", "a city")
KEYWORDS = ("blue", "seven", "river", "apple", "north", "stone", "green", "music", "paper", "light")
FOLLOW_UPS = ("Can you say more about {kw}?", "Please use the word {kw} in your answer.",
              "I still want to hear about {kw}.", "Last try: just say {kw}.")


class ScriptedUserEnv:
    """One topic's scripted user; gymnasium-style, an action is the assistant's reply (text)."""

    def __init__(self, task: int) -> None:
        self.topic = TOPICS[task % len(TOPICS)]
        self.task = task
        self.messages: list[dict[str, str]] = []
        self.keyword = ""
        self.turns = 0
        self.max_turns = 0
        self.found = False

    def _obs(self) -> dict[str, Any]:
        return {"messages": [dict(m) for m in self.messages]}

    def _info(self) -> dict[str, Any]:
        return {"success": self.found, "turns": self.turns}

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """A new conversation: keyword and patience drawn from ``seed``."""
        rng = np.random.default_rng(seed)
        self.keyword = KEYWORDS[int(rng.integers(len(KEYWORDS)))]
        self.max_turns = int(rng.integers(2, 5))
        self.turns = 0
        self.found = False
        self.messages = [{"role": "user", "content": f"Tell me about {self.topic} and {self.keyword}."}]
        return self._obs(), self._info()

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Take the assistant's reply (``None``: a warm-up no-op) and answer with the next user turn."""
        if action is None:
            return self._obs(), 0.0, False, False, self._info()
        reply = str(action)
        self.turns += 1
        self.messages.append({"role": "assistant", "content": reply})
        self.found = self.keyword in reply.lower()
        done = self.found or self.turns >= self.max_turns
        if not done:
            follow = FOLLOW_UPS[(self.turns - 1) % len(FOLLOW_UPS)].format(kw=self.keyword)
            self.messages.append({"role": "user", "content": follow})
        return self._obs(), 1.0 if self.found else 0.0, done, False, self._info()


class ChatPolicy:
    """A chat model through ``BatchEngine``: one batched, greedy generation per tick for all live chats."""

    name = "chat"
    batched_planning = True

    def __init__(self, *, model: str = "tiny-llm", device: str = "cpu", max_tokens: int = 12,
                 max_batch_size: int = 64) -> None:
        from lmmbench.engines import BatchEngine

        dtype = "float32" if device == "cpu" else "bfloat16"
        self.engine = BatchEngine.from_model(model, device=device, dtype=dtype, max_batch_size=max_batch_size)
        self.max_tokens = max_tokens
        self._ids = itertools.count()

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """Greedy decoding draws no noise: the memory holds the pending reply only."""
        return EpisodeMemory(key=key, seed=seed)

    def dummy_action(self) -> Any:
        """Warm-up steps send no reply."""
        return None

    def plan(self, items: Sequence[ActItem]) -> None:
        """Generate every conversation's next reply in one batched call."""
        from lmmbench.engines import GenerationRequest, SamplingParams

        reqs = [GenerationRequest(messages=it.observation["messages"], request_id=f"chat-{next(self._ids)}",
                                  sampling=SamplingParams(max_tokens=self.max_tokens, temperature=0.0))
                for it in items]
        outs = self.engine.generate_many(reqs)
        for it, out in zip(items, outs, strict=True):
            if out.finish_reason == "error":
                raise RuntimeError(f"{it.memory.key.id}: generation failed: {out.error}")
            it.memory.data["reply"] = out.text
            it.memory.trace.append(list(out.token_ids))

    def needs_plan(self, item: ActItem) -> bool:
        """Every turn needs a new reply."""
        del item
        return True

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """The action is the planned reply: this call does no model work."""
        return [[it.memory.data.pop("reply")] for it in items]
