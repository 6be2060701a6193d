"""Training: the Trainer protocol, its `hf` backend, the critic-first PPO step, SFT and critic
warm-up stages, and the `t1 train` command (see t1/train/cli.py for the usage).
"""
