"""bound_calls.py with one call shape: unbound."""
import os

SHAPE = "unbound"
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bound_calls.py")).read())
