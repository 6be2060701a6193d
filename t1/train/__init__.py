"""Training: the Trainer protocol, its `hf` backend, the critic-first PPO step, SFT and critic
warm-up stages (on either backend; under torchrun with megatron), the `t1 train` command (see
t1/train/cli.py for the usage) and its self-launch through srun + torchrun inside a Slurm
allocation (`launch`).

Pipeline stage 12 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model, engine, agent, tito, rollout, ppo.
"""
