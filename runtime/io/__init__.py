"""What goes in and comes out of a Session: inputs.py (images, .npy, folders, video, cameras),
preprocess_fast.py (frames into the input buffer with no copies), outputs.py (top-k, dequantized
outputs), drawing.py (boxes and labels drawn for --save)."""
