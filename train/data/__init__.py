"""Data from a source to a batch: files, the embedded corpus, tokenizers, examples, labels, prepared stores, collators
and batch order. Imports only `modeling` (docs/design.md, "Layers"); how data is read and prepared: docs/training.md,
"Data"."""
