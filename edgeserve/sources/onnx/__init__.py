"""The .onnx source (source.py) and edgeserve's own ONNX reader: reader.py turns the graph into a
torch module, one node at a time (values.py: what the operator translations share; movement.py,
reductions.py, recurrent.py for LSTM/GRU, loop.py for Loop and If; nodes.py: a submodule per node
for the litert-torch route; layout.py; input_ranges.py: the values an integer input takes).
onnx2tf_lowering.py is the other route, onnx2tf in a child process."""
