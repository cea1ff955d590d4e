"""The build files beside the generated C: an example main.c, a Makefile and a CMakeLists.txt.

They build as written on a host (`make run`, or `cmake -S . -B build && cmake --build build`)
and give a library for a board's own build (`make lib CC=arm-none-eabi-gcc CFLAGS=...`, or
`add_subdirectory` of the folder, which then adds no example program). With --cmsis-nn both
take the user's CMSIS-NN from CMSIS_NN_DIR and its sources from cmsis_nn_sources.txt. The
text depends only on the model's name, its numbers of inputs and outputs and whether CMSIS-NN is
called, so a regeneration gives the same bytes. The texts are files under
firmware/templates/mcu_c/; this module fills them in.
"""

from __future__ import annotations


from edgeserve.converters.microcontroller.templates import template


def project_files(name: str, outputs: int, cmsis_nn: bool, inputs: int = 1) -> dict[str, str]:
    return {"main.c": _main(name, outputs, inputs), "Makefile": _makefile(name, cmsis_nn),
            "CMakeLists.txt": _cmake(name, cmsis_nn)}


def _main(name: str, outputs: int, inputs: int = 1) -> str:
    """firmware/templates/mcu_c/main.c.in, with how the inputs are zeroed and quantized and how
    each output is printed, for this model's numbers of inputs and outputs."""
    up = name.upper()
    if inputs == 1:
        zero = f"  for (unsigned i = 0; i < sizeof input / sizeof input[0]; ++i) input[i] = {up}_INPUT_ZERO_POINT;\n"
        how = (f" * each value x as round(x / {up}_INPUT_SCALE) + {up}_INPUT_ZERO_POINT, clamped to the range\n"
               f" * of {up}_INPUT_TYPE (int8_t, or int16_t for a model with int16 activations).\n")
    else:  # several inputs lie back to back in the one buffer, each with its own zero point
        zero = "".join(
            f"  for (unsigned i = 0; i < {up}_INPUT{k}_BYTES / sizeof input[0]; ++i) "
            f"input[{up}_INPUT{k}_OFFSET / sizeof input[0] + i] = {up}_INPUT{k}_ZERO_POINT;\n"
            for k in range(inputs))
        how = (f" * each value x of input k as round(x / {up}_INPUTk_SCALE) + {up}_INPUTk_ZERO_POINT, clamped\n"
               f" * to the range of {up}_INPUT_TYPE, at {up}_INPUTk_OFFSET bytes into the one input buffer.\n")
    if outputs == 1:
        calls = (f"  print_output(0, output, sizeof output / sizeof output[0], {up}_OUTPUT_SCALE, "
                 f"{up}_OUTPUT_ZERO_POINT);\n")
    else:  # several outputs lie back to back in the one buffer
        calls = "".join(
            f"  print_output({k}, output + {up}_OUTPUT{k}_OFFSET / sizeof output[0], {up}_OUTPUT{k}_BYTES / "
            f"sizeof output[0],\n               {up}_OUTPUT{k}_SCALE, {up}_OUTPUT{k}_ZERO_POINT);\n"
            for k in range(outputs))
    return template("mcu_c/main.c.in").substitute(name=name, NAME=up, zero=zero, how=how, calls=calls)


def _makefile(name: str, cmsis_nn: bool) -> str:
    library = template("mcu_c/Makefile_cmsis_nn.in").substitute(name=name) if cmsis_nn else ""
    return template("mcu_c/Makefile.in").substitute(name=name, library=library)


def _cmake(name: str, cmsis_nn: bool) -> str:
    library = template("mcu_c/cmake_cmsis_nn.in" if cmsis_nn else "mcu_c/cmake_portable.in").substitute(name=name)
    return template("mcu_c/CMakeLists.txt.in").substitute(name=name, library=library)
