from .module import Module  # noqa: F401
from .container import ModuleDict, ModuleList, Sequential  # noqa: F401
from .linear import Identity  # noqa: F401
