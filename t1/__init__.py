"""T1: PPO for a Mixture-of-Experts terminal agent, rewarded by executing each task's verifier.

The package is organised by idea (see README.md, "Layout"); the command line is `t1`
(t1/cli.py), one subcommand per workflow rule.
"""

__version__ = "0.1.0"
