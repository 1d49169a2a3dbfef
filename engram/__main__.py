"""``python -m engram``: the ``engram`` command."""

from train_rl import run

if __name__ == "__main__":
    run()
