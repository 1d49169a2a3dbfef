"""Key patterns and memory kinds, registered by name in `ATTENTIONS`: which keys a query sees and how
they exist. A pattern narrows the window's mask or adds a soft bias; a memory kind decides which keys exist
(retrieved, compressed, hashed, projected). Both are `Pattern` subclasses
and read through the one kernel (`policies.attention.layer.attend`); the position scheme is the other
axis (`policies.positions`), and `MultiHeadAttention` joins the two.

Adding one is one module in this package with a class decorated `@ATTENTIONS.register(name, summary)`:
the package imports every module it holds.
"""

import importlib

from policies.catalogue import ATTENTIONS, import_package

import_package(__name__, __path__)
importlib.import_module("policies.positions")  # the layer joins each pattern with a position scheme: fill both

__all__ = ["ATTENTIONS"]
