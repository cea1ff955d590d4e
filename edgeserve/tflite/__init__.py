"""The .tflite file: reading it (model.py, over flatbuffer.py's bounds-checked tables and
schema.py's schema as data), validating what LiteRT and TFLM trust (verify.py), and writing it
back after a rewrite (metadata.py's unpack_model/pack_model, edit.py's new tensors and operators)."""
