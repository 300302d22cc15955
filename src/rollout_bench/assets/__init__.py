"""Offline assets: tokenizer, dataset (and its reward functions), model directory, LoRA adapter, warm start,
prompt selection."""
