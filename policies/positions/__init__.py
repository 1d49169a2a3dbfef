"""Position schemes, registered by name in `POSITIONS`: what order information attention gets.

A scheme only contributes to the score (`Position`): a rotation of queries and
keys, a content-query bias, a score term, a value term, or a normaliser; it never decides which keys a query
sees (that is the key pattern's job, `policies.attention`). Adding one is one module in this package with
a class decorated `@POSITIONS.register(name, summary)`: the package imports every module it holds. The
interface (`none`) and Transformer-XL's relative positions (`relative`, the family's default) stand in
`policies.attention.layer`, beside the kernel that adds their score.
"""

from policies.catalogue import POSITIONS, import_package

import_package(__name__, __path__)

__all__ = ["POSITIONS"]
