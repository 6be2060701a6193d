"""What a run keeps on disk, and how it keeps it safe: atomic checkpoints with completion
markers (`ckpt` reads and checks them, `ckpt_write` writes and seals them, `ckpt_retention`
prunes old ones), one writer per output and no orphans (`lock`), incidents (`incidents`), the
JSON-lines metrics log (`metrics_log`), pinned inputs by content hash (`pinning`).

    python -m t1.store.ckpt ROOT [--verify size]     # list checkpoints and their problems
    python -m t1.store.pinning PATH...               # digest of files / directories

Every stage that writes a run's files builds on these; the atomic file writer itself is
t1/records.py.

Pipeline stage 1 of 17 (the order: t1/__init__.py). May import: the shared root modules only.
"""
