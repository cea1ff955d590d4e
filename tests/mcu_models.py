"""The full-integer models in ../shared/testdata that the mcu target must accept (testdata/README.md)."""

INT8_MODELS = [
    "mlperf-tiny/kws_ref_model.tflite",
    "mlperf-tiny/vww_96_int8.tflite",
    "mlperf-tiny/pretrainedResnet_quant.tflite",
    "mlperf-tiny/ad01_int8.tflite",
    "mlperf-tiny/str_ww_ref_model.tflite",
    "tflm/person_detect.tflite",
    "tflm/micro_speech_quantized.tflite",
    "tflm/hello_world_int8.tflite",
    "tflm/trained_lstm_int8.tflite",  # LSTM: four int16 gate scratch buffers
    "tflm/keyword_scrambled.tflite",  # SVDF: int32 scratch buffers per operator
    "tflm/mobilenet_v2_quantized_1x3x224x224.tflite",
]
