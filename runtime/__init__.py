"""edgeserve.runtime: run converted artifacts on a device.

Installed from the top-level ``runtime/`` folder as ``edgeserve.runtime``. Importing this
package imports no interpreter; each backend module imports its engine on first use.

    >>> from edgeserve.runtime import Session
    >>> s = Session("build/manifest.json", profile="raspberry-pi-5")  # doctest: +SKIP
"""

from edgeserve.runtime.session import Attempt, Session

__all__ = ["Attempt", "Session"]
