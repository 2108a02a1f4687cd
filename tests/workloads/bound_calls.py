"""Modules called through their bound __call__, which passes through no slot_tp_call:
`model.__call__(x)`, a stored bound method with positional args and with **kwargs (as
transformers' generate() calls its model for each decoding step), one that raises inside
a child and is caught, submodules called that way inside a traced module's forward, and
ordinary calls around them. BOUND_SHAPE picks one (default: all, one call site each: see
docs/design.md on debug registers). The model is torch's (nn.Linear, tensors) when torch
offers it, else the stand-in's (tests/standin: nn.Module only, plain lists and floats)."""
import functools
import os

import torch
from torch import nn

REAL = hasattr(nn, "Linear")


class Scale(nn.Module):
    def forward(self, x, by=2.0):
        return [v * by for v in x]


def linear(n_in, n_out):
    return nn.Linear(n_in, n_out) if REAL else Scale()


def mul(x, k):
    return x * k if REAL else [v * k for v in x]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = linear(4, 4)
        self.act = nn.ReLU() if REAL else nn.Identity()

    def forward(self, x, fail=False):
        h = self.proj(x)
        if fail:
            raise ValueError("a step that fails")
        return self.act(h)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = linear(3, 4)
        self.block = Block()
        self.head = linear(4, 2)

    def forward(self, x, scale=1.0, fail=False):
        return self.head(self.block(mul(self.embed(x), scale), fail=fail))


class Inner(nn.Module):
    """Calls its blocks through their bound __call__ (`block.__call__(h)`, the last one
    raising, caught), or a stored one (`step = self.first.__call__; step(h)`). An
    ordinary call comes first: a bound call is seen at its first module call, and two
    bound calls entered without one between them are not traced (docs/design.md). One
    call site each: x86 has 4 debug registers per thread, and evalmetry's note_samples
    takes one (docs/design.md)."""

    def __init__(self, stored):
        super().__init__()
        self.stored = stored
        self.out = linear(4, 4)
        self.first = Block()
        self.second = Block()

    def forward(self, x):
        h = self.out(x)
        if self.stored:
            step = self.first.__call__
            for _ in range(2):
                h = step(h)
            return h
        for block, fail in ((self.first, False), (self.second, False), (self.second, True)):
            try:
                h = block.__call__(h, fail)
            except ValueError:
                pass
        return h


class InnerFirst(nn.Module):
    """Its first module call is a bound one (`self.first.__call__(h)`: nothing below
    this module was cleared yet), after a helper called through C (`self.helper(*args)`)
    that calls a child: what a parent's first child costs must not hide either."""

    def __init__(self):
        super().__init__()
        self.first = Block()
        self.out = linear(4, 4)

    def helper(self, h):
        return self.out(h)

    def forward(self, x):
        h = self.first.__call__(x)
        return self.helper(*(h,))


class InnerLeaf(nn.Module):
    """Calls a module without submodules through its bound __call__
    (`self.proj.__call__(h)`): it makes no module call of its own, so evmbpf does not see
    it (docs/design.md), and says so."""

    def __init__(self):
        super().__init__()
        self.out = linear(4, 4)
        self.proj = linear(4, 4)

    def forward(self, x):
        h = self.out(x)
        return self.proj.__call__(h)


class InnerUnbound(nn.Module):
    """Calls a block through Module.__call__ as a plain function, the block its first
    argument (`nn.Module.__call__(self.first, h)`: no slot_tp_call, no bound method)."""

    def __init__(self):
        super().__init__()
        self.out = linear(4, 4)
        self.first = Block()

    def forward(self, x):
        h = self.out(x)
        for _ in range(3):
            h = nn.Module.__call__(self.first, h)
        return h


class Nested(nn.Module):
    """Its first module call is a bound one: called itself through its bound __call__,
    two bound calls are entered with no module call between them."""

    def __init__(self):
        super().__init__()
        self.first = Block()

    def forward(self, x):
        return self.first.__call__(x)


class Top(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = linear(3, 4)
        self.inner = Nested()
        self.head = linear(4, 2)

    def forward(self, x):
        return self.head(self.inner.__call__(self.embed(x)))


class After(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = linear(2, 2)

    def forward(self, y):
        return self.proj(y)


def after(module, args, out):
    """A forward hook that calls a module through its bound __call__."""
    module.extra.__call__(out)


class Hooked(nn.Module):
    """Its forward hook calls `self.extra.__call__(out)`: on 3.9-3.12 that call's first
    module call sits at the C stack depth of the model's own children (docs/design.md)."""

    def __init__(self):
        super().__init__()
        self.embed = linear(3, 4)
        self.head = linear(4, 2)
        self.extra = After()
        self.register_forward_hook(after)

    def forward(self, x):
        return self.head(self.embed(x))


def passing(forward):
    """A wrapper of a forward, as transformers' decorators wrap LlamaModel.forward."""
    def wrapper(self, *args, **kwargs):
        return forward(self, *args, **kwargs)
    return wrapper


def then_mid(forward):
    """The outer wrapper: after the forward, `self.mid.__call__(out)` (a bound call: no
    slot_tp_call) from this wrapper's own frame, where the inner wrapper's was."""
    def wrapper(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        return self.mid.__call__(out)
    return wrapper


class Mid(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Block()

    def forward(self, x):
        return self.inner(x)


class Decorated(nn.Module):
    """Its forward wrapped twice: its children are called 3 frames above its
    Module.__call__ frames: the walk at its first child keeps them, its second child is
    checked against them. The outer wrapper then calls `mid` through its bound __call__,
    whose frames take the inner wrapper's place: its child's frames no longer match, and
    the walk finds `mid`."""

    def __init__(self):
        super().__init__()
        self.embed = linear(3, 4)
        self.body = linear(4, 4)
        self.mid = Mid()

    @then_mid
    @passing
    def forward(self, x):
        return self.body(self.embed(x))


class SubModel(nn.Module):
    """Bound calls of submodules inside a traced module's forward."""

    def __init__(self, stored=False, first=False, leaf=False, unbound=False):
        super().__init__()
        self.embed = linear(3, 4)
        self.inner = (InnerLeaf() if leaf else InnerFirst() if first else
                      InnerUnbound() if unbound else Inner(stored))
        self.head = linear(4, 2)

    def forward(self, x):
        return self.head(self.inner(self.embed(x)))


def build():
    shape = globals().get("SHAPE") or os.environ.get("BOUND_SHAPE", "all")
    if shape == "nested":
        return Top()
    if shape == "hook":
        return Hooked()
    if shape == "decorated":
        return Decorated()
    if shape in ("sub", "substep", "subfirst", "subleaf", "subunbound"):
        return SubModel(stored=shape == "substep", first=shape == "subfirst",
                        leaf=shape == "subleaf", unbound=shape == "subunbound")
    return Model()


def dunder(model, x):
    for _ in range(3):
        model.__call__(x)


def kwargs(model, x):
    step = model.__call__
    for i in range(3):
        inputs = {"x": x, "scale": 0.5 * i}
        out = step(**inputs)
    return out


def positional(model, x):
    step = model.__call__
    for _ in range(3):
        step(x)


def raises(model, x):
    step = model.__call__
    for i in range(3):
        try:
            step(x, 1.0, i == 1)
        except ValueError:
            pass


def kwcall(model, x):
    """A keyword in the call itself: CALL_KW on 3.13+, KW_NAMES + CALL on 3.11/3.12."""
    step = model.__call__
    for i in range(3):
        step(x, scale=0.5 * i)


def first(model, x):
    """The process's first module call a bound one: the probe that finds its call site
    also writes the first call's record, and both hold the thread."""
    for _ in range(4):
        model.__call__(x)


def unbound(model, x):
    """Module.__call__ called as a plain function, the model its first argument: the
    callable on the caller's stack is the function, with a NULL beside it."""
    for _ in range(3):
        nn.Module.__call__(model, x)


def callimpl(model, x):
    """Module._call_impl called as a plain function: torch 2's keeps self, args and
    kwargs in cells (a closure captures them), and it is the outermost frame here."""
    for _ in range(3):
        nn.Module._call_impl(model, x)


def mapped(model, x):
    """The bound __call__ called from C (map's next, a functools.partial): no call
    instruction of the caller's frame calls it, and its result goes to no slot there."""
    for _ in range(2):
        list(map(model.__call__, [x, x]))
    functools.partial(nn.Module.__call__, model)(x)


def pair(a, b):
    return b


def lower(model, x):
    """The model lower on the caller's value stack than the bound call's callable:
    `pair(model, step(x))`."""
    step = model.__call__
    for _ in range(3):
        pair(model, step(x))


def sub(model, x):
    for _ in range(3):
        model(x)


def run(model):
    x = torch.ones(2, 3) if REAL else [1.0, 2.0, 3.0]
    shape = globals().get("SHAPE") or os.environ.get("BOUND_SHAPE", "all")
    if shape in ("sub", "substep", "subfirst", "subleaf", "subunbound", "nested", "hook",
                 "decorated"):
        sub(model, x)
        return
    if shape != "first":
        model(x)
    for name, work in (("dunder", dunder), ("kwargs", kwargs), ("positional", positional),
                       ("raises", raises), ("kwcall", kwcall), ("lower", lower),
                       ("first", first), ("unbound", unbound), ("callimpl", callimpl),
                       ("mapped", mapped)):
        if shape in (name, "all"):
            work(model, x)
    model(x)
