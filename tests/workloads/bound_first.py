"""bound_calls.py with one call shape: first."""
import os

SHAPE = "first"
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bound_calls.py")).read())
