"""Energy, power sources, thermal sampling and the thermal governor (``edgeserve profile``)."""
