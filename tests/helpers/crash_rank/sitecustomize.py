"""Test helper: make ONE rank of a Slurm job die mid-run (tests/slurm/test_slurm_jobs.py).

Put this folder on PYTHONPATH and set HVDCOURSE_CRASH_RANK=N: the process whose SLURM_PROCID is N
exits with status 3 about a second after Horovod has started, as a crashing rank would.
"""

import os
import sys
import threading
import time


def _crash_when_horovod_runs(rank: str) -> None:
    while True:
        hvd = sys.modules.get("horovod.tensorflow.keras")
        try:
            if hvd is not None and hvd.is_initialized():
                break
        except Exception:  # the module is still being imported
            pass
        time.sleep(0.2)
    time.sleep(float(os.environ.get("HVDCOURSE_CRASH_AFTER", "1")))
    print(f"[crash-test] rank {rank} exits with status 3 on purpose", flush=True)
    os._exit(3)


_rank = os.environ.get("SLURM_PROCID")
if _rank is not None and _rank == os.environ.get("HVDCOURSE_CRASH_RANK"):
    threading.Thread(target=_crash_when_horovod_runs, args=(_rank,), daemon=True).start()
