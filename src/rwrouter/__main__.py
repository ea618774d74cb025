"""``python -m rwrouter ...``: the same as the ``rwrouter`` console script."""

import sys

from rwrouter.cli import main

if __name__ == "__main__":
    sys.exit(main())
