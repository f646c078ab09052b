"""Training: the trainer's loop, the collector and its rollout, advantages, minibatches,
optimizers, the reward scaler, signals, the replay buffer, and the algorithms (ppo, spo; pqn and
dqn on the Q-learner of qlearning; dqn and sac on the replay buffer) as Trainer subclasses."""
