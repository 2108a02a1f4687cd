"""A model's bound __call__ called from SITES places of one loop (4 here; 8 in
bound_sites8.py): `step(**kw)`, `model.__call__(x)`, `step(x=x)`, `step(x, 2.0)`, and more of
those shapes, with plain calls in between. Each site takes two debug registers while a
call from it is watched, and x86 has 4 (evalmetry's note_samples takes one): only the
calls open at once need watching, so every call from every site is traced. The model is
bound_calls.py's (torch's nn.Linear when torch offers it, else the stand-in's)."""
import os

exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bound_calls.py")).read())


def run(model):  # noqa: F811 (bound_calls.py's, replaced)
    x = torch.ones(2, 3) if REAL else [1.0, 2.0, 3.0]
    n = globals().get("SITES", 4)
    step = model.__call__
    kw = {"x": x}
    for _ in range(3):
        model(x)                       # a plain call between
        step(**kw)                     # site 1
        model.__call__(x)              # site 2
        step(x=x)                      # site 3
        step(x, 2.0)                   # site 4
        if n > 4:
            model(x)
            step(**kw)                 # site 5
            model.__call__(x, 0.5)     # site 6
            step(x=x, scale=3.0)       # site 7
            step(x, scale=0.25)        # site 8
