"""bound_calls.py with one call shape: mapped."""
import os

SHAPE = "mapped"
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bound_calls.py")).read())
