"""Policies built from the observation space: networks, action distributions, the wrappers
around them (LSTM, action masks, observation normalization), the Policy protocol and `build`."""
