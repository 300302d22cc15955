"""A byte-level BPE tokenizer the project trains itself, saved as a transformers tokenizer dir."""
from pathlib import Path

from ..core import atomic
from . import chat, dataset, learnable

EOS = "<|endoftext|>"
PAD = "<|pad|>"


def build(out_dir, vocab_size: int = 4096, seed: int = 0) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # both built datasets' text, so that the warm start's worked solutions ("Start:", "of") are words
    corpus = [chat.SYSTEM_PROMPT] + [r["prompt"] + " " + r["solution"] for r in dataset.generate(4000, seed)]
    corpus += [r["prompt"] + "\n" + r["worked_solution"] for r in learnable.generate(2000, seed)]
    tok = Tokenizer(models.BPE())
    # one token per digit, as in Qwen's and Llama's vocabularies: with whole numbers as tokens (" 82"), a
    # sum is a lookup over pairs of tokens and "<SOLUTION>66" re-spells " 66" digit by digit, which a warm
    # start cannot learn in minutes (results/published/h200x2-2026-11-30-warmstart-4b-attempt)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, PAD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens(list(chat.MARKERS))  # the format markers stay single tokens, as in real chat vocabularies
    assert tok.get_vocab_size() <= vocab_size + len(chat.MARKERS)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD)
    hf.chat_template = chat.CHAT_TEMPLATE
    with atomic.directory(out_dir) as tmp:
        hf.save_pretrained(tmp)
    return Path(out_dir)
