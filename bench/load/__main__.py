"""`python -m bench.load` (same as `python -m bench load`)."""

import sys

from bench.load.cli import main

sys.exit(main())
