"""Whether an artifact holds against its source: the gate on every output (gate.py), the metrics
it reads (metrics.py), detections matched when a decoder is recorded (detections.py), and the
fixtures `edgeserve verify` runs again (fixtures.py)."""
