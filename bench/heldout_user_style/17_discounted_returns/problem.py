import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, gamma: float = 0.99):
        super().__init__()
        self.gamma = gamma

    def forward(self, rewards, dones, bootstrap_value):
        # rewards: (num_envs, T) float32; dones: (num_envs, T) bool
        # bootstrap_value: (num_envs,) value estimate of the state after the last step
        returns = torch.empty_like(rewards)
        running = bootstrap_value
        for t in reversed(range(rewards.shape[1])):
            running = rewards[:, t] + self.gamma * running * (~dones[:, t]).float()
            returns[:, t] = running
        return returns


def get_inputs():
    num_envs, horizon = 2048, 128
    rewards = torch.randn(num_envs, horizon)
    dones = torch.rand(num_envs, horizon) < 0.02
    return [rewards, dones, torch.randn(num_envs) * 10]


def get_init_inputs():
    return [0.99]
