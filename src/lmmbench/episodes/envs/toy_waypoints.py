"""``toy-waypoints``: a 2-D point robot on a grid that must visit every waypoint of its task.

Task ``i`` is a fixed layout (3 waypoints on a 16 x 16 grid, drawn from the task index);
``reset(seed)`` places the robot at a start cell drawn from that seed. An action is two floats; the
environment rounds each to the nearest integer and clips it to -1..1 (a king move), so positions
are integers and every test (``visited``, ``success``) is exact. Two actions that differ by less
than 1e-5 give the same move unless one lies within 1e-5 of a rounding boundary (x.5); the
environment counts such actions in ``info["stat_near_rounding_boundary"]`` so an analysis can
tell when last-bit differences could have mattered.

Observations are image-like: ``{"image": float32 (3, 16, 16), "position": int64 (2,)}`` with the
channels robot / unvisited waypoints / visited waypoints.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["GRID", "ROUNDING_MARGIN", "ToyWaypointsEnv", "task_layout"]

GRID = 16
ROUNDING_MARGIN = 1e-5


def task_layout(task: int) -> list[tuple[int, int]]:
    """The waypoints of task ``task``: 3 cells, at least 4 apart (Chebyshev), off the border."""
    rng = np.random.default_rng(10_007 + task)
    count = 3
    points: list[tuple[int, int]] = []
    while len(points) < count:
        p = (int(rng.integers(1, GRID - 1)), int(rng.integers(1, GRID - 1)))
        if all(max(abs(p[0] - q[0]), abs(p[1] - q[1])) >= 4 for q in points):
            points.append(p)
    return points


class ToyWaypointsEnv:
    """The environment of one task; gymnasium-style ``reset`` / ``step``."""

    def __init__(self, task: int) -> None:
        self.task = task
        self.waypoints = task_layout(task)
        self.position = np.zeros(2, dtype=np.int64)
        self.visited = [False] * len(self.waypoints)
        self.near_boundary = 0

    def _observe(self) -> dict[str, Any]:
        image = np.zeros((3, GRID, GRID), dtype=np.float32)
        image[0, self.position[1], self.position[0]] = 1.0
        for (x, y), seen in zip(self.waypoints, self.visited, strict=True):
            image[2 if seen else 1, y, x] = 1.0
        return {"image": image, "position": self.position.copy()}

    def _info(self) -> dict[str, Any]:
        done = all(self.visited)
        return {"success": done, "visited": sum(self.visited), "waypoints": len(self.waypoints),
                "stat_near_rounding_boundary": self.near_boundary}

    def _mark(self) -> float:
        reward = 0.0
        for i, (x, y) in enumerate(self.waypoints):
            if not self.visited[i] and self.position[0] == x and self.position[1] == y:
                self.visited[i] = True
                reward += 1.0
        return reward

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start at a cell drawn from ``seed`` (never on a waypoint), nothing visited."""
        rng = np.random.default_rng(seed)
        taken = set(self.waypoints)
        while True:
            start = (int(rng.integers(0, GRID)), int(rng.integers(0, GRID)))
            if start not in taken:
                break
        self.position = np.array(start, dtype=np.int64)
        self.visited = [False] * len(self.waypoints)
        self.near_boundary = 0
        return self._observe(), self._info()

    def render(self, scale: int = 8) -> np.ndarray:
        """An RGB frame (uint8, ``16*scale`` square): robot red, unvisited waypoints green, visited blue."""
        image = self._observe()["image"]
        rgb = (np.moveaxis(image, 0, -1) * 255).astype(np.uint8)
        return np.repeat(np.repeat(rgb, scale, axis=0), scale, axis=1)

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Move by the rounded, clipped action; terminated once every waypoint is visited."""
        flat = np.asarray(action, dtype=np.float64).ravel()
        if flat.size != 2:  # never cut to 2 without a word
            raise ValueError(f"a toy-waypoints action is 2 values (dx, dy), got {flat.size}")
        move = []
        for value in (float(flat[0]), float(flat[1])):
            if abs(value - math.floor(value) - 0.5) < ROUNDING_MARGIN:
                self.near_boundary += 1
            move.append(min(1, max(-1, math.floor(value + 0.5))))
        x = min(GRID - 1, max(0, int(self.position[0]) + move[0]))
        y = min(GRID - 1, max(0, int(self.position[1]) + move[1]))
        self.position = np.array((x, y), dtype=np.int64)
        reward = self._mark()
        done = all(self.visited)
        return self._observe(), reward, done, False, self._info()
