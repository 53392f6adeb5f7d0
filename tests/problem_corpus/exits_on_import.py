"""Malformed: the file calls sys.exit while it is executed (a script's `if True: sys.exit(...)`)."""
import sys

sys.exit(5)
