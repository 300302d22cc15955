"""The compiled + CUDA-graph path on a GPU (tiny Qwen3, float32): greedy identical to HF, graph
replays equal to the uncompiled eager path for sampled GRPO groups under preemption."""
import pytest
import torch

from rollout_bench.engine import Engine, EngineConfig, random_model
from rollout_bench.workload import Sampling

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
P = 16


@pytest.fixture(scope="module")
def model():
    return random_model.build("qwen3-tiny", seed=0, device="cuda", tie_word_embeddings=False)


def prompts(n=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 4096, (int(k),), generator=g).tolist() for k in torch.randint(3, 60, (n,), generator=g)]


def config(**kw):
    base = {"max_batch": 8, "max_seq_len": 96, "page_size": P, "decode_chunk": 4, "num_pages": 24, "capture_all": False,
            "decode_kernel_options": {"BLOCK_N": P}}  # the default 64-wide KV tile would not divide a page
    return EngineConfig(**{**base, **kw})


def test_graphs_greedy_match_hf(model):
    ps = prompts()
    engine = Engine(model, config())
    assert engine.runner.graphs_on
    outs = engine.generate(ps, Sampling(), 24, ignore_eos=True)
    assert engine.scheduler.preemptions > 0
    with torch.no_grad():
        for p, o in zip(ps, outs):
            ref = model.generate(torch.tensor([p], device="cuda"), max_new_tokens=24, min_new_tokens=24,
                                 do_sample=False, pad_token_id=0)[0, len(p):].tolist()
            assert o.token_ids == ref
    assert engine.runner.graphs, "decode ran through captured graphs"


def test_graphs_sampling_equals_uncompiled(model):
    ps = prompts(6, seed=2)
    sampling = Sampling(temperature=0.1, top_p=0.97, top_k=5, min_p=0.5, seed=3)
    fast = Engine(model, config()).generate(ps, sampling, 20, n=4, ignore_eos=True)
    slow = Engine(model, config(cuda_graphs=False, compile=False, num_pages=80, max_batch=24)).generate(
        ps, sampling, 20, n=4, ignore_eos=True)
    assert [o.token_ids for o in fast] == [o.token_ids for o in slow]
    torch.testing.assert_close(torch.tensor([o.logprobs for o in fast]), torch.tensor([o.logprobs for o in slow]),
                               atol=1e-3, rtol=0)
