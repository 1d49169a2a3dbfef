"""Position schemes, registered by name in :data:`POSITIONS`: what order information attention gets.

A scheme only contributes to the score (:class:`~policies.positions.base.Position`): a rotation of queries and
keys, a content-query bias, a score term, a value term, or a normaliser; it never decides which keys a query
sees (that is the key pattern's job, :mod:`policies.attention`). Adding one is one module in this package with
a class decorated ``@POSITIONS.register(name, summary)``: the package imports every module it holds.
"""

from policies.catalogue import Catalogue, import_package

POSITIONS: Catalogue = Catalogue("position", shared=("d_model", "n_heads", "d_head", "max_distance"))
"""name → :class:`~policies.catalogue.Entry` (``.cls``, ``.summary``) of every position scheme"""

import_package(__name__, __path__)

__all__ = ["POSITIONS"]
