"""Action distributions: what the rollout samples is what training scores."""

from __future__ import annotations

import pytest
import torch
from gymnasium import spaces

from puffer.models import ActionDist


@pytest.mark.parametrize("space", [spaces.Discrete(4), spaces.MultiDiscrete([3, 5])])
def test_sampled_discrete_actions_follow_the_softmax_and_score_as_in_training(space):
    dist = ActionDist(space)
    torch.manual_seed(0)
    logits = torch.randn(1, dist.num_logits).repeat(100_000, 1)
    action, logprob = dist.sample(logits)
    scored, _ = dist.log_prob_entropy(logits, action)
    torch.testing.assert_close(logprob, scored, rtol=0, atol=0)  # the PPO ratio starts at 1
    columns = action.reshape(len(action), -1)
    for column, chunk in enumerate(logits[0].split(dist.nvec)):
        frequency = torch.bincount(columns[:, column], minlength=len(chunk)) / len(action)
        # 100k draws: a frequency's standard error is at most 0.0016
        torch.testing.assert_close(frequency, chunk.softmax(-1), rtol=0, atol=0.008)
