"""Audio in: pcm.py (16 kHz mono PCM from WAV files or raw bytes), microphone.py (arecord, live
stdin), wakeword.py (streaming wake-word detection with its state)."""
