"""The GRPO training set: DAPO-schema rows as chat prompts plus an `answer` column, as in the seed."""
import numpy as np

from ..assets import chat
from ..assets import dataset as dataset_assets


def load(source, tokenizer, quantile: float, limit: int | None = None, shuffle_seed: int | None = None):
    """-> (dataset with `prompt` messages and `answer`, longest kept prompt in tokens), in the order of
    `shuffle_seed` (None: as stored).

    The seed keeps only prompts up to the `quantile` of templated lengths, so the long tail does
    not set the padding width of every batch.
    """
    ds = dataset_assets.load(str(source))
    if limit is not None and limit < len(ds):
        ds = ds.select(range(limit))
    ds = ds.map(lambda x: {"prompt": chat.messages(x["prompt"]), "answer": str(x["solution"])})
    ids = tokenizer.apply_chat_template(list(ds["prompt"]), add_generation_prompt=True, tokenize=True,
                                        return_dict=True)["input_ids"]
    lengths = np.array([len(x) for x in ids])
    cutoff = int(np.quantile(lengths, quantile))
    keep = [i for i, n in enumerate(lengths) if n <= cutoff]
    ds = ds.select(keep)
    return (ds if shuffle_seed is None else ds.shuffle(seed=shuffle_seed).flatten_indices()), cutoff
