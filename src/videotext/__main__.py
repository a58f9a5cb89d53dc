"""`python -m videotext …` — what `torchrun … -m videotext …` runs on every rank."""
from videotext.cli import main

if __name__ == "__main__":  # worker processes (spawn / forkserver) re-import this module
    main()
