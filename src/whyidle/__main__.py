"""``python -m whyidle ...``: the same command line as ``whyidle ...``."""

from whyidle.cli import run

if __name__ == "__main__":
    run()
