"""Data: files, corpora, tokenizers, examples, collators, batches and prepared stores."""
