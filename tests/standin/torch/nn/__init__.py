from . import modules  # noqa: F401
from .modules import Identity, Module, ModuleDict, ModuleList, Sequential  # noqa: F401
