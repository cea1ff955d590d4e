"""edgeserve.runtime: run converted artifacts on a device.

Installed from the top-level ``runtime/`` folder as ``edgeserve.runtime``. Importing this
package imports no interpreter; each backend module imports its own on first use.
"""
