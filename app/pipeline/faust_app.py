"""The worker app for `faust -A app.pipeline.faust_app worker` (and `quota-streams worker`).

Faust's command line finds an app by module attribute, so this module builds the one worker
its process runs, from the environment's settings (`app.pipeline.worker` has everything else).
"""

from __future__ import annotations

from app.gc_tuning import tune_gc
from app.pipeline.worker import Worker
from app.settings import load

tune_gc()  # also under `faust -A app.pipeline.faust_app worker`, which skips app.cli
worker = Worker(load())
app = worker.app
