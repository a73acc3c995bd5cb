#!/usr/bin/env python
"""Django's command-line utility for Loop."""

import os
import sys

# A worker works many runs at once, each in a thread of its own. The embedder's numeric libraries
# would each start a thread per core for every text as well, and fight the runs for the cores
# (bench/load.py: a third less throughput at 16 runs at once on 2 cores); set before they load.
ONE_THREAD_EACH = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def main() -> None:
    if sys.argv[1:2] == ["worker"]:
        for name, value in ONE_THREAD_EACH.items():
            os.environ.setdefault(name, value)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
