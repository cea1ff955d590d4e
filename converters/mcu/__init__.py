"""mcu target: microcontroller builds for TensorFlow Lite for Microcontrollers (TFLM).

Pure Python: reading the model, planning the tensor arena and writing C need neither
TensorFlow nor tflite-micro. ``edgeserve.converters.microcontroller.tflm`` drives the real TFLM interpreter
when the ``convert`` extra is installed, to check those plans.
"""

from edgeserve.converters.mcu.converter import McuConverter  # registers "mcu"

__all__ = ["McuConverter"]
