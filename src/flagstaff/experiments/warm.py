"""Importing the results module (scipy.special and numpy: about 0.4 s of CPU, more on a loaded
machine) ahead of a worker's first results request, in a thread, once per process."""

from __future__ import annotations

import importlib
import sys
import threading

RESULTS_MODULE = "flagstaff.experiments.results"
_started = threading.Event()


def warm_results() -> None:
    """Start importing the results module in a daemon thread, unless that has begun."""
    if _started.is_set() or RESULTS_MODULE in sys.modules:
        return
    _started.set()
    threading.Thread(
        target=importlib.import_module,
        args=(RESULTS_MODULE,),
        name="flagstaff-warm-results",
        daemon=True,
    ).start()
