"""Offline assets: tokenizer, dataset, model directory, LoRA adapter, prompt selection."""
