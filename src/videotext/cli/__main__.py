"""`python -m videotext.cli …`, the same command as `videotext …`."""
from videotext.cli import main

main()
