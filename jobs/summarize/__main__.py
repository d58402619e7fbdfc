"""Entry point: `python -m jobs.summarize --input ... --output ...` (also under `ray job submit`)."""

import sys

from jobs.summarize.cli import main

sys.exit(main())
