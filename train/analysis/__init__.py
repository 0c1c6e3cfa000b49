"""Analysis behind one command each: attention maps, the lineage experiment, throughput. Imports setup, run, metrics,
data and modeling, never a command (docs/design.md, "Layers")."""
