"""torch.nn.Module, stand-in: the attribute, hook and call machinery of the real one,
without parameters, buffers or tensors.

Kept close to torch's own code where an outside reader (evmbpf) or the reference
tracer can see the difference:
- `__call__ = _call_impl`, `_call_impl(self, *args, **kwargs)`: at the frame's start
  localsplus[0] is self, [1] the args tuple, [2] the kwargs dict (no cells: nothing in
  it is captured by a closure).
- `_modules` is a dict in the instance __dict__; `__setattr__` puts Module values
  there (not in __dict__), and `__getattr__` finds them.
- hooks live in dicts keyed by handle id, `with_kwargs` pre-hooks get
  (module, args, kwargs) and may return (args, kwargs); forward hooks may replace the
  result; named_modules() de-duplicates like torch.
"""
from collections import OrderedDict

from ...utils.hooks import RemovableHandle

# Global hooks, as torch.nn.modules.module has them (register_module_forward_*_hook).
_global_forward_pre_hooks = OrderedDict()
_global_forward_hooks = OrderedDict()


def register_module_forward_pre_hook(hook):
    handle = RemovableHandle(_global_forward_pre_hooks)
    _global_forward_pre_hooks[handle.id] = hook
    return handle


def register_module_forward_hook(hook):
    handle = RemovableHandle(_global_forward_hooks)
    _global_forward_hooks[handle.id] = hook
    return handle


def _forward_unimplemented(self, *input):
    raise NotImplementedError(
        f'Module [{type(self).__name__}] is missing the required "forward" function')


class Module:
    training = True
    _version = 1

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() takes no arguments")
        # object.__setattr__, as torch does: these never go through our __setattr__.
        super().__setattr__("training", True)
        super().__setattr__("_parameters", {})
        super().__setattr__("_buffers", {})
        super().__setattr__("_non_persistent_buffers_set", set())
        super().__setattr__("_backward_hooks", OrderedDict())
        super().__setattr__("_forward_hooks", OrderedDict())
        super().__setattr__("_forward_hooks_with_kwargs", OrderedDict())
        super().__setattr__("_forward_hooks_always_called", OrderedDict())
        super().__setattr__("_forward_pre_hooks", OrderedDict())
        super().__setattr__("_forward_pre_hooks_with_kwargs", OrderedDict())
        super().__setattr__("_modules", {})

    forward = _forward_unimplemented

    # -- calling -------------------------------------------------------------------

    def _call_impl(self, *args, **kwargs):
        forward_call = self.forward
        if not (self._forward_hooks or self._forward_pre_hooks
                or _global_forward_hooks or _global_forward_pre_hooks):
            return forward_call(*args, **kwargs)

        pre_hooks = list(_global_forward_pre_hooks.items()) + list(self._forward_pre_hooks.items())
        for hook_id, hook in pre_hooks:
            if hook_id in self._forward_pre_hooks_with_kwargs:
                args_kwargs_result = hook(self, args, kwargs)
                if args_kwargs_result is not None:
                    if isinstance(args_kwargs_result, tuple) and len(args_kwargs_result) == 2:
                        args, kwargs = args_kwargs_result
                    else:
                        raise RuntimeError(
                            "forward pre-hook must return None or a tuple of "
                            f"(new_args, new_kwargs), but got {args_kwargs_result}.")
            else:
                args_result = hook(self, args)
                if args_result is not None:
                    if not isinstance(args_result, tuple):
                        args_result = (args_result,)
                    args = args_result

        try:
            result = forward_call(*args, **kwargs)
        except BaseException:
            # Hooks registered with always_call=True run even when forward raises.
            for hook_id, hook in list(self._forward_hooks.items()):
                if hook_id in self._forward_hooks_always_called:
                    try:
                        if hook_id in self._forward_hooks_with_kwargs:
                            hook(self, args, kwargs, None)
                        else:
                            hook(self, args, None)
                    except Exception:
                        pass
            raise

        hooks = list(_global_forward_hooks.items()) + list(self._forward_hooks.items())
        for hook_id, hook in hooks:
            if hook_id in self._forward_hooks_with_kwargs:
                hook_result = hook(self, args, kwargs, result)
            else:
                hook_result = hook(self, args, result)
            if hook_result is not None:
                result = hook_result
        return result

    __call__ = _call_impl

    # -- hooks ---------------------------------------------------------------------

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        handle = RemovableHandle(self._forward_pre_hooks,
                                 extra_dict=self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        handle = RemovableHandle(self._forward_hooks,
                                 extra_dict=[self._forward_hooks_with_kwargs,
                                             self._forward_hooks_always_called])
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    # -- attributes ----------------------------------------------------------------

    def __getattr__(self, name):
        # Only reached when normal lookup fails, as in torch.
        if "_modules" in self.__dict__:
            modules = self.__dict__["_modules"]
            if name in modules:
                return modules[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        modules = self.__dict__.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self.__dict__.pop(name, None)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (torch.nn.Module or None expected)")
            modules[name] = value
        else:
            super().__setattr__(name, value)

    def __delattr__(self, name):
        if name in self._modules:
            del self._modules[name]
        else:
            super().__delattr__(name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._modules))

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name).__name__}")
        if "." in name or name == "":
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        module = self
        for item in target.split(".") if target else []:
            module = getattr(module, item)
        return module

    # -- walking -------------------------------------------------------------------

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if self not in memo:
            if remove_duplicate:
                memo.add(self)
            yield prefix, self
            for name, module in self._modules.items():
                if module is None:
                    continue
                submodule_prefix = prefix + ("." if prefix else "") + name
                yield from module.named_modules(memo, submodule_prefix, remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        memo = set()
        for name, module in self._modules.items():
            if module is not None and module not in memo:
                memo.add(module)
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def parameters(self, recurse=True):
        return iter(())

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return iter(())

    def buffers(self, recurse=True):
        return iter(())

    # -- modes ---------------------------------------------------------------------

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        return self

    def to(self, *args, **kwargs):
        return self

    def cpu(self):
        return self

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = []
        for name, module in self._modules.items():
            child = repr(module).replace("\n", "\n  ")
            lines.append(f"({name}): {child}")
        main = type(self).__name__ + "(" + self.extra_repr()
        if lines:
            main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"
