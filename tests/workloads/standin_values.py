"""Plain Python values through nested modules: what an outside reader must decode.

Runs on real torch and on the stand-in (tests/standin): only nn.Module, nn.ModuleList,
nn.Sequential and nn.Identity, no tensors. Modules are called with, and return, the
values a tracer describes from raw memory: ints of every size and sign (one digit, many
digits, bool), floats (1.0, 1e-05, -0.0, nan, inf, subnormal), str of each kind
(ASCII, Latin-1, BMP, astral; empty; longer than the 60-character cut), tuples, lists
and dicts nested deeper than the describe depth and wider than its width, namedtuples,
OrderedDict, dicts with non-str keys and deleted entries, None, and things that are
only named by type (bytes, set, complex, a plain object). Positional and keyword
arguments both, a child reachable under two names, a child called twice per forward.

    PYTHONPATH=tests/standin python3 ../shared/reference/run_workload.py \
        tests/workloads/standin_values.py --trace out.jsonl
"""
import collections

from torch import nn

Point = collections.namedtuple("Point", "x y")
BIG = 2 ** 100
HUGE = -(3 ** 200)
LONG_ASCII = "".join(chr(ord("a") + i % 26) for i in range(100))
LONG_UNICODE = "\u00e9t\u00e9 \u65e5\u672c\u8a9e \U0001F600 " * 8  # > 60 characters, kind 4


class Opaque:
    """Described by type name only."""


def deep(n):
    """A list nested n levels deep, each level wider than 8."""
    value = list(range(10))
    for level in range(n):
        value = [value] + [level * 1.5, "lvl%d" % level] + list(range(8))
    return value


def with_holes():
    d = {"k%d" % i: i * i for i in range(12)}
    for i in (0, 3, 7):
        del d["k%d" % i]
    return d


class Scalars(nn.Module):
    """Takes scalars positionally and by keyword, returns a tuple of them."""

    def forward(self, i, f, s, flag=None, scale=1.0, name=""):
        return (i, f, s, flag, scale, name)


class Containers(nn.Module):
    """Returns a dict mixing every container kind."""

    def forward(self, seq, mapping, point=None, **extra):
        return {"seq": seq, "mapping": mapping, "point": point, "extra": extra}


class Echo(nn.Module):
    """Returns its argument: the same value is seen as input and output."""

    def forward(self, x):
        return x


class Nothing(nn.Module):
    """No arguments in, None out."""

    def forward(self):
        return None


class Layer(nn.Module):
    def __init__(self, index):
        super().__init__()
        self.index = index
        self.scalars = Scalars()
        self.containers = Containers()
        self.pipe = nn.Sequential(Echo(), nn.Identity(), Echo())

    def forward(self, value, *, step):
        a = self.scalars(value["int"], value["float"], value["str"],
                         flag=value["flag"], scale=value["scale"], name=value["name"])
        b = self.containers(value["seq"], value["mapping"], point=value["point"],
                            step=step, index=self.index, opaque=Opaque())
        c = self.pipe(value["odd"])
        return [a, b, c]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(i) for i in range(3)])
        self.shared = Echo()
        self.alias = self.shared  # reachable twice: named "shared" only
        self.nothing = Nothing()

    def forward(self, values, step=0, **options):
        outputs = []
        for layer, value in zip(self.layers, values):
            outputs.append(layer(value, step=step))
        self.shared(options)
        self.alias(outputs[0][0])  # the same module again, by its other name
        self.nothing()
        return tuple(outputs), step, options.get("last")


def build():
    return Model()


def _values(step):
    nan, inf = float("nan"), float("inf")
    return [
        {   # small scalars
            "int": 0, "float": 1.0, "str": "", "flag": True, "scale": 1e-05, "name": "plain",
            "seq": (1, -1, 2 ** 30 - 1, 2 ** 30, -(2 ** 30)),
            "mapping": {"a": None, "b": False, "c": 0.5},
            "point": Point(1, 2.5), "odd": None,
        },
        {   # big and special
            "int": BIG + step, "float": nan, "str": "h\u00e9llo w\u00f6rld", "flag": None,
            "scale": -inf, "name": "\u20ac \u65e5\u672c",
            "seq": [HUGE, 2 ** 63, -(2 ** 63), 2 ** 64 - 1, 10 ** 40, -1, True, 5e-324, -0.0, 1e300],
            "mapping": collections.OrderedDict([("z", inf), ("y", -inf), ("x", nan)]),
            "point": Point(x=Point(HUGE, "p"), y=[Point(0, 0)]),
            "odd": {1: "int key", (2, 3): "tuple key", None: "none key", 4.5: "float key",
                    "s": b"bytes", "t": {1, 2}, "u": 1 + 2j, "v": frozenset()},
        },
        {   # long, wide, deep
            "int": -12345678901234567890, "float": 123456789.123, "str": LONG_UNICODE,
            "flag": False, "scale": 1e16, "name": LONG_ASCII,
            "seq": deep(3), "mapping": with_holes(),
            "point": Point(x=deep(2), y={"k%d" % i: [i] * i for i in range(10)}),
            "odd": ((((("five levels",),),),), [[[[]]]], {"a": {"b": {"c": {"d": 1}}}}),
        },
    ]


def run(model):
    for step in range(3):
        model(_values(step), step=step, last=(step, "last", -step * 0.25), flag=step == 1,
              empty={}, unicode="\U0001F600" * (step + 1))
