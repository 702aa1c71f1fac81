"""``python -m corun``: the same as the ``corun`` command."""

from corun.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
