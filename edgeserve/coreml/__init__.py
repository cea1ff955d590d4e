"""Core ML target internals: a numpy evaluator for ML programs, used to verify packages on Linux."""
