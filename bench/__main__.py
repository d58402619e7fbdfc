"""`python -m bench ...`: the benchmark commands where the project is importable but not
installed (a GPU host's wheelhouse, `bench/gpu_bench.sh`); installed, they are `trilemma bench`."""

import sys

from bench.cli import add_commands
from serve_app.cli import main

sys.exit(main(["bench", *sys.argv[1:]], plugins=[add_commands]))
