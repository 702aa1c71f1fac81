"""``python -m benchmarks``."""

import sys

from benchmarks import main

if __name__ == "__main__":
    sys.exit(main())
