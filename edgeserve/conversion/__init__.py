"""The convert orchestration: one source to every asked-for target (convert.py), the targets
scheduled side by side (schedule.py), a target already proven taken again (reuse.py, over the
bounded target cache of cache.py), and which source output each artifact's outputs are
(source_outputs.py). What a target does is in converters/<target>/; this package only runs them."""
