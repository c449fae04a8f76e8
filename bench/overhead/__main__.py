"""`python -m bench.overhead` (same as `python -m bench overhead`)."""

import sys

from bench.overhead.cli import main

sys.exit(main())
