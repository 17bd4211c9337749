"""Filling a frozen slots dataclass in its own ``__init__`` at the cost of a plain class.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__`` (its
own ``__setattr__`` refuses), which made a ``Lease`` and a ``Job`` cost 2 to 3 µs each to build;
one of each is built per delivered job. The few classes on that path write their ``__init__``
by hand instead: the new instance becomes, for the moment it is filled, an instance of a plain
class with the same slots (:func:`fields_class`), and then switches back. The instance is frozen
again before ``__init__`` returns; equality, hashing, ``replace`` and pickling are the
dataclass's own.
"""

from __future__ import annotations

from typing import Any


def fields_class(cls: type) -> type:
    """A plain class with the same slots as ``cls`` (a dataclass with ``slots=True``): CPython
    lets an instance switch between two classes whose slots are the same."""
    return type(f"_{cls.__name__}Fields", (), {"__slots__": cls.__dict__["__slots__"]})


def thaw(instance: object, fields: type) -> Any:
    """``instance``, switched to ``fields`` (its class's fields_class) to be filled; the caller
    switches it back by assigning its ``__class__``."""
    object.__setattr__(instance, "__class__", fields)
    return instance
