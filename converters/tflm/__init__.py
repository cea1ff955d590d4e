"""The mcu target (this folder is named for the engine it builds for): microcontroller builds for
TensorFlow Lite for Microcontrollers (TFLM).

Pure Python: reading the model, planning the tensor arena and writing C need neither
TensorFlow nor tflite-micro. ``edgeserve.converters.microcontroller.tflm`` drives the real TFLM interpreter
when the ``convert`` extra is installed, to check those plans.
"""

from edgeserve.converters.tflm.converter import McuConverter  # registers "mcu"

__all__ = ["McuConverter"]
