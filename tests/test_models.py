"""Action distributions (what the rollout samples is what training scores) and the Nature
CNN's memory layouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from puffer.models import ActionDist, NatureCNN


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


def test_nature_cnn_layouts_agree_and_leave_the_input_alone():
    """channels_last is a speed choice: the same weights give the same outputs (to float
    rounding) as NCHW, from uint8 pixels or from floats, and a float input is not scaled in
    place under its caller."""
    torch.manual_seed(0)
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    nhwc = NatureCNN(obs_space, spaces.Discrete(4), channels_last=True)
    nchw = NatureCNN(obs_space, spaces.Discrete(4), channels_last=False)
    nchw.load_state_dict(nhwc.state_dict())
    pixels = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    floats = pixels.float()
    with torch.no_grad():
        logits, value = nhwc(pixels)
        same_logits, same_value = nchw(pixels)
        float_logits, _ = nhwc(floats)
    torch.testing.assert_close(logits, same_logits)
    torch.testing.assert_close(value, same_value)
    assert torch.equal(float_logits, logits)
    assert torch.equal(floats, pixels.float())
    assert value.abs().max() > 0  # not a degenerate all-zero comparison
