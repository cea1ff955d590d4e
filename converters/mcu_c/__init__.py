"""mcu-c: plain C99 for microcontrollers, no interpreter, no heap (see converter.py).

Importing the package registers the target; the generator and its checks load only when
a conversion runs.
"""

from edgeserve.converters.mcu_c.converter import McuCConverter

__all__ = ["McuCConverter"]
