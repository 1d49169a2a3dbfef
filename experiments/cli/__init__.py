"""The subcommands of `train_rl.py`, one module each with its parser and `main(argv) -> int`.

Parsers are built from light modules only (no torch, SB3 or rliable), so `--help` answers at
once; what a command needs to run is imported inside its `main` after the arguments are parsed.
"""
