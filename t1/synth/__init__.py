"""Recursive verified task synthesis (RST): a programmatic step library, the recursive loop,
a language-model synthesizer, and validation in fresh sandboxes.

    t1 synth --rounds 5 --out results/synth           # the embedded default (no model)
    t1 synth --rounds 2 --out DIR --llm-url http://127.0.0.1:30000 --llm-api openai

Modules: `steps` (Step, Artifact, the registry and the category modules that fill it),
`draft` (a task as an ordered list of steps; rendering to the v2/Harbor layout), `validate`
(fresh-sandbox checks), `recursive` (the loop), `llm` (model-written steps), `cli`.

Pipeline stage 13 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model, engine, agent, tito, rollout, ppo, train.
"""
