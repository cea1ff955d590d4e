"""The record a conversion leaves: the manifest (record.py: read, merge, stamp, write), its
Ed25519 signature (signing.py), the staging that replaces an output folder only when a run is
done (staging.py), and `edgeserve verify` reading it all back (verify.py)."""
