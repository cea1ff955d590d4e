"""Core ML target internals: conversion with coremltools, and a numpy evaluator that checks packages on Linux.

toolchain   coremltools imported once, its logs, progress bars and warnings routed to logging
frontend    source model → fp16 ML program (ImageType from the PreprocessSpec, classifier labels)
quantize    INT8 weights; INT8 activations with ranges computed by the evaluator (no macOS needed)
blob        the package's weight file (MIL blob storage v2), read with numpy
program     the written package's ML program: ops, constants, interface, metadata
ops         numpy implementations of the ML program ops edgeserve's conversions produce
evaluator   runs a program op by op; refuses, by name, any op it cannot run
predict     Core ML's own predict (macOS only), fed exactly what the evaluator is fed

converter   the target itself (prepare → calibrate → emit → verify), registered as "coreml"
"""

from edgeserve.converters.coreml.converter import CoreMLConverter  # registers "coreml"

__all__ = ["CoreMLConverter"]
