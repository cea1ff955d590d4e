"""Load Keras 2 ``.h5`` files in Keras 3.

Keras 3 refuses some layer configs that Keras 2 wrote. The MLPerf Tiny reference models
(vww_96.h5, str_ww_ref_model.h5) fail on ``DepthwiseConv2D(groups=1)``: Keras 2's
DepthwiseConv2D inherited ``groups`` from Conv2D and serialised it, Keras 3 has no such
argument. Each shim below accepts exactly the legacy keys it knows to be harmless and
refuses any other value, so a file is never loaded with a silently different meaning.
"""

from __future__ import annotations

from typing import Any

from edgeserve.errors import SourceModelError


def legacy_custom_objects(keras: Any) -> dict[str, Any]:
    """Keras 3 layer classes that also accept the Keras 2 config keys listed above."""

    class DepthwiseConv2D(keras.layers.DepthwiseConv2D):  # type: ignore[misc, name-defined]
        def __init__(self, *args: Any, groups: int = 1, **kwargs: Any) -> None:
            if groups != 1:
                raise SourceModelError(
                    f"DepthwiseConv2D with groups={groups} in a Keras 2 file has no Keras 3 "
                    "equivalent; re-save the model with groups=1"
                )
            super().__init__(*args, **kwargs)

    return {"DepthwiseConv2D": DepthwiseConv2D}
