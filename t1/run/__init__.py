"""The campaign's machinery: a run's pinned config and `t1 run-config` (`campaign`), a
segment's plan (`plan`: trainer ranks and SGLang replicas on one Slurm allocation), `t1
segment` (`segment`: K PPO steps from the newest checkpoint), the fleet's job steps
(`segment_fleet`; `replica_watch`: exit and hang detection, restart, reload), what moving the
weights to the fleet costs per step (`weight_traffic`), the layout and commands of one PPO
step (`steps`), and starting those commands forked from a driver that imported them once
(`warm_start`).

    t1 segment --config F --iter N --from DIR --out DONE [--dry-run]

Pipeline stage 15 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model, engine, agent, tito, rollout, ppo, train,
synth, curate.
"""
