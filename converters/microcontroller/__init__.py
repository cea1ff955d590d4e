"""What the two microcontroller targets share, so neither imports the other: the TFLM model side
(ops.py the operator table, arena.py the arena planner, memory.py the fit against a profile,
split_tail.py, select_v2.py, op_rewrite.py), TFLM's integer arithmetic (quant.py, which
tflite-int8's integer rewrites use too), the full-INT8 model both build from (int8_source.py),
check inputs (samples.py), C names (names.py), and the tools: tflm.py (TFLM built for the host,
run in a child: child.py), toolchain.py (gcc and arm-none-eabi-gcc), cortex_m4.py (QEMU)."""
