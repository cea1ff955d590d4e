"""Models run on a stream: video_pipeline.py (Session.stream: the next frame is read and
preprocessed while this one runs) and stream_step.py (Session.stream_step: per-stride inference on
lent views)."""
