"""Lineage training: tokenizers, the data pipeline, the embedded corpus and the shared engine.

Modules are imported explicitly (``from train.data import load_text_dataset``); this file
imports nothing so that ``import train`` stays cheap.
"""
