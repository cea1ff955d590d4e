"""Microcontroller builds for TensorFlow Lite for Microcontrollers (TFLM).

Pure Python: reading the model, planning the tensor arena and writing C need neither
TensorFlow nor tflite-micro. ``edgeserve.mcu.tflm`` drives the real TFLM interpreter
when the ``convert`` extra is installed, to check those plans.
"""
