"""bound_sites.py with 8 call sites."""
import os

SITES = 8
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bound_sites.py")).read())
