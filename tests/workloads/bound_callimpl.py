"""bound_calls.py with one call shape: callimpl."""
import os

SHAPE = "callimpl"
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bound_calls.py")).read())
