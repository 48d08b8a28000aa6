"""LeRobot's ACT policy, as lerobot 0.4.4 builds it, adapted to lmmbench's policy interface (``act(items)``) for
the built-in ``toy-waypoints`` environment. Runs where lerobot is installed (its own venv: it pins torch < 2.11,
torchvision < 0.26 and huggingface-hub < 0.36, so it cannot share lmmbench's):

    PYTHONPATH=src LEROBOT_VENV/bin/python -m lmmbench.cli.main serve-policy \
        --policy tests/episodes/lerobot_act_policy.py:LeRobotACT --env toy-waypoints --port 8765

No download: ``ACTConfig(pretrained_backbone_weights=None)`` builds torchvision's ResNet-18 with random weights,
and the whole policy is initialised from ``torch.manual_seed(--seed)``. The features are toy-waypoints':
``observation.image`` (3, 16, 16) float in [0, 1] (its channels are 0/1 masks), ``observation.state`` the robot's
cell (x, y), ``action`` a move (dx, dy) the environment rounds to a king move. LeRobot's own pipelines
(``make_pre_post_processors``: batch dimension, device, ``NormalizerProcessorStep`` / ``UnnormalizerProcessorStep``,
MEAN_STD as ACT's ``normalization_mapping`` says) normalise with :data:`STATS`, stated here from the environment's
geometry (there is no data set): a cell uniform on 0..15 has mean 7.5 and standard deviation sqrt((16² - 1) / 12)
= 4.61; a king move's component is uniform on {-1, 0, 1}: mean 0, standard deviation sqrt(2/3) = 0.816; the image
masks are left as they are (mean 0, std 1).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lmmbench.episodes import SimplePolicy

GRID = 16
CELL_STD = math.sqrt((GRID**2 - 1) / 12)
MOVE_STD = math.sqrt(2 / 3)
STATS = {
    "observation.image": {"mean": [[[0.0]]] * 3, "std": [[[1.0]]] * 3},
    "observation.state": {"mean": [7.5, 7.5], "std": [CELL_STD, CELL_STD]},
    "action": {"mean": [0.0, 0.0], "std": [MOVE_STD, MOVE_STD]},
}
#: ACT made small enough for CPU tests; everything else is ACTConfig's default
ACT_SIZES = {"dim_model": 64, "n_heads": 4, "dim_feedforward": 128, "n_encoder_layers": 1, "n_decoder_layers": 1,
             "n_vae_encoder_layers": 1, "latent_dim": 8, "chunk_size": 8, "n_action_steps": 4}


class LeRobotACT(SimplePolicy):
    """lerobot's ``ACTPolicy`` with random weights: ONE ``predict_action_chunk`` per ``act`` call for every item,
    between lerobot's own pre- and post-processors; each item executes the first ``n_action_steps`` actions."""

    name = "lerobot-act"

    def __init__(self, settings: Any) -> None:
        import torch
        from lerobot.configs.types import FeatureType, PolicyFeature
        from lerobot.policies.act.configuration_act import ACTConfig
        from lerobot.policies.act.modeling_act import ACTPolicy
        from lerobot.policies.factory import make_pre_post_processors

        torch.manual_seed(settings.weight_seed)
        self.config = ACTConfig(
            input_features={"observation.image": PolicyFeature(FeatureType.VISUAL, (3, GRID, GRID)),
                            "observation.state": PolicyFeature(FeatureType.STATE, (2,))},
            output_features={"action": PolicyFeature(FeatureType.ACTION, (2,))},
            pretrained_backbone_weights=None, device=settings.device, **ACT_SIZES)
        self.policy = ACTPolicy(self.config).eval()
        stats = {key: {k: torch.tensor(v, dtype=torch.float32) for k, v in s.items()} for key, s in STATS.items()}
        self.preprocess, self.postprocess = make_pre_post_processors(self.config, dataset_stats=stats)

    def dummy_action(self) -> Any:
        return np.zeros(2, np.float32)

    def act(self, items: list[Any]) -> list[list[Any]]:
        import torch

        batch = {"observation.image": torch.as_tensor(np.stack([it.observation["image"] for it in items]),
                                                      dtype=torch.float32),
                 "observation.state": torch.as_tensor(np.stack([it.observation["position"] for it in items]),
                                                      dtype=torch.float32)}
        with torch.no_grad():
            chunk = self.policy.predict_action_chunk(self.preprocess(batch))[:, : self.config.n_action_steps]
        actions = self.postprocess(chunk).cpu().numpy().astype(np.float32)  # (B, n_action_steps, 2), unnormalised
        out = []
        for it, chunk_i in zip(items, actions, strict=True):
            it.memory.trace.append(chunk_i)
            out.append(list(chunk_i))
        return out
