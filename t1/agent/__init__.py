"""The conversation and the agent loop: ChatML rendering and tool calls (`chat`), the
tokenizer's format and loading (`tokenizer`), its pinned corpus, training and the `t1
tokenizer` command (`tokenizer_train`), one episode in a sandbox (`loop`), the scripted expert
(`expert`), and the trajectory record (`trajectory`).

Pipeline stage 8 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model, engine.
"""
