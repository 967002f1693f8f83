"""Models built from attnlayers: NMT, captioning, BERT, GPT (installed as attnlayers.applications)."""
