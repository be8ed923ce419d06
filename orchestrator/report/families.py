"""Which family each network is in, for the report's sections: trainers.common.inputs.FAMILIES (the
convolutional image networks, the fully connected ones, the recurrent ones, the Transformers), in
its order, declared there beside the tables that build the networks so that a network added to a
table is in its family's section without a word here. Light: no pandas, no matplotlib."""
from __future__ import annotations

from typing import Any

from trainers.common.inputs import FAMILIES, Family

#: A network no family names (a site's own, or one a later release renamed): a section of its own, last.
OTHER = Family("other", "Other networks", (), "img/s", False)
#: Every section a report may have, in its order.
ORDER = (*FAMILIES, OTHER)
#: The families whose tables show tokens/s beside samples/s.
TOKENS = tuple(f.name for f in FAMILIES if f.tokens)

_OF = {model: family for family in FAMILIES for model in family.networks}


def family_of(model: Any) -> Family:
    """The family of a network by its name (OTHER for a name no family has)."""
    return _OF.get(model, OTHER)
