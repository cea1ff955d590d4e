"""Detector outputs as boxes in the original frame's pixels (camera apps, issue of record 17).

``geometry``: the inverse of the PreprocessSpec's crop / resize / letterbox, per frame size.
``boxes``: Detection and non-maximum suppression. ``yolo``: YOLO-style heads.
Not built yet: TFLite_Detection_PostProcess SSD outputs, MediaPipe SSD anchors, an
OutputSpec in the manifest and `run --decoder`.
"""
