"""Training: the trainer's loop, the collector and its rollout, advantages, minibatches,
optimizers, the reward scaler, signals, and the algorithms (ppo, spo) as Trainer subclasses."""
