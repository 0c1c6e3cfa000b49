"""Analysis behind one command each: attention maps, experiments, throughput."""
