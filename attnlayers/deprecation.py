"""Old names that keep working while users move to the new ones: a renamed keyword argument
(:func:`renamed_keyword`) and renamed module attributes (:func:`renamed_attributes`). Every use of an old name
warns (a DeprecationWarning naming the new one) and then does exactly what the new name does.
"""

import functools
import inspect
import sys
import warnings


__all__ = ["renamed_attributes", "renamed_keyword"]


def renamed_keyword(old, new):
    """A decorator: the function also takes its argument ``new`` under the keyword ``old`` (deprecated).

    ``old=value`` warns and is passed on as ``new=value``; passing both (``new`` by keyword or by position) is a
    ValueError naming both.

    Args:
        old: the deprecated keyword. new: the name of the function's parameter.

    Example:
    >>> @renamed_keyword("strategy", "search")
    ... def generate(next, prompt, max_length, search="greedy"): ...
    >>> generate(next, prompt, 8, strategy="beam")     # DeprecationWarning; the same as search="beam"
    """

    def decorate(function):
        parameters = inspect.signature(function).parameters
        kind = parameters[new].kind
        # The index of `new` in *args when it is passed by position (None: keyword-only).
        position = list(parameters).index(new) if kind is inspect.Parameter.POSITIONAL_OR_KEYWORD else None

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if old in kwargs:
                if new in kwargs or (position is not None and len(args) > position):
                    raise ValueError(
                        f"{function.__qualname__}: `{old}` is the deprecated name of `{new}`; pass `{new}` only. "
                        f"Received both, with {old}={kwargs[old]!r}."
                    )
                warnings.warn(f"{function.__qualname__}: `{old}=` is deprecated; use `{new}=` (same values).",
                              DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper

    return decorate


def renamed_attributes(module_name, renames):
    """A module ``__getattr__`` (PEP 562) serving the old names of a module's renamed attributes.

    Args:
        module_name: the module's ``__name__``. renames: {old name: new name}.

    Returns:
        ``__getattr__(name)``: for an old name, a DeprecationWarning and the object under the new name (the same
        object: ``isinstance`` and subclassing work); else AttributeError.

    Example:
    >>> __getattr__ = renamed_attributes(__name__, {"get_strategy": "get_search"})
    """

    def __getattr__(name):
        if name not in renames:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        warnings.warn(f"{module_name}.{name} is deprecated; use {module_name}.{renames[name]}.", DeprecationWarning,
                      stacklevel=2)
        return getattr(sys.modules[module_name], renames[name])

    return __getattr__
