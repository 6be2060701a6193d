"""`t1.cli` with the CPU shim (cpu_shim.py) installed first: what the torchrun tests launch.

    torchrun --nproc-per-node 2 tests/megatron/shimmed_cli.py train --stage ppo --config F ...

Tests only (test_megatron_ppo_torchrun.py). T1_TEST_NO_REDUCE=1 breaks the guard those tests
check: megatron-core's gradient reduction (`finalize_model_grads`) becomes a no-op, so each rank
steps on its own rows' gradients.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")

import cpu_shim  # noqa: E402

cpu_shim.install(recompute=False)  # the stage's tiny config trains without recompute
if os.environ.get("T1_TEST_NO_REDUCE") == "1":
    import megatron.core.distributed as mcd

    mcd.finalize_model_grads = lambda *a, **k: None

from t1.cli import main  # noqa: E402

sys.exit(main())
