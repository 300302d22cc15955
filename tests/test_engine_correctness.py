"""Flex engine vs HF on tiny random Qwen3 and Llama (CPU, float32; Llama also with a GQA ratio of 3, whose
decode folds each KV head's query heads into the query axis): greedy tokens identical with mixed prompt
lengths across page boundaries, staggered arrivals, forced preemption, EOS, GRPO groups; and in bf16,
sampled-token logprobs against the trainer's computation."""
from collections import Counter

import pytest
import torch

from rollout_bench.core.workload import Sampling
from rollout_bench.diagnostics import random_model
from rollout_bench.engine import Engine, EngineConfig
from rollout_bench.engine.sampler import request_seed

PAGE = 16
MAX_NEW = 24
GREEDY = Sampling()


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_prompts(n, seed, lo=3, hi=3 * PAGE + 5, vocab=4096):
    g = torch.Generator().manual_seed(seed)
    lens = [PAGE - 1, PAGE, PAGE + 1, 2 * PAGE + 3] + torch.randint(lo, hi, (n - 4,), generator=g).tolist()
    return [torch.randint(0, vocab, (n_,), generator=g).tolist() for n_ in lens]


def hf_greedy(model, prompts, max_new=MAX_NEW):
    with torch.no_grad():
        return [model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                               max_new_tokens=max_new, min_new_tokens=max_new, do_sample=False,
                               pad_token_id=0)[0, len(p):].tolist() for p in prompts]


def truncate(tokens, eos):
    return tokens[:tokens.index(eos) + 1] if eos in tokens else tokens


# 6 query heads on 2 KV heads (head_dim 16): a GQA ratio of 3, as Llama-3.2-3B's 24/8, which decode folds
GQA3 = {"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2}
MODELS = {"qwen3-tiny": ("qwen3-tiny", {}), "llama-tiny": ("llama-tiny", {}), "llama-tiny-gqa3": ("llama-tiny", GQA3)}


@pytest.fixture(scope="module", params=list(MODELS))
def case(request):
    name, overrides = MODELS[request.param]
    model = random_model.build(name, seed=0, tie_word_embeddings=False, **overrides)
    prompts = make_prompts(18, seed=1)
    return request.param, model, prompts, hf_greedy(model, prompts)


def test_decode_folds_only_a_non_power_of_two_gqa_group(case):
    name, model, _, _ = case
    runner = small_engine(model).runner
    assert runner.q_rows == [3 if name.endswith("gqa3") else 1] * len(runner.layers)


def small_engine(model, **kw):
    base = {"max_batch": 6, "max_seq_len": 4 * PAGE + MAX_NEW, "page_size": PAGE, "max_prefill_tokens": 4 * PAGE,
            "decode_chunk": 4, "decode_chunk_no_eos": 4, "num_pages": 14}
    return Engine(model, EngineConfig(**{**base, **kw}))


def test_no_eos_batches_sync_once_per_page_of_steps(case):
    """With EOS off, no sequence can finish before its known length: chunks grow to a page of steps
    (fewer host syncs), with tokens and logprobs unchanged; with EOS on, chunks stay short."""
    _, model, prompts, _ = case
    sampling = Sampling(temperature=0.9, top_p=0.95, top_k=40, seed=3)
    runs = {}
    for no_eos in (4, 64):
        engine = small_engine(model, num_pages=64, decode_chunk_no_eos=no_eos)
        outs = engine.generate(prompts[:4], sampling, 33, ignore_eos=True)
        runs[no_eos] = (outs, engine.timings["decode_chunks"])
    (small, n_small), (big, n_big) = runs[4], runs[64]
    assert [o.token_ids for o in small] == [o.token_ids for o in big]
    torch.testing.assert_close(torch.tensor([o.logprobs for o in small]), torch.tensor([o.logprobs for o in big]))
    assert (n_small, n_big) == (32 // 4, 32 // PAGE)  # 32 decode steps after the prefill's token
    eos_engine = small_engine(model, num_pages=64, decode_chunk_no_eos=64)
    eos_engine.generate(prompts[:4], sampling, 33, eos_token_id=4095)
    assert eos_engine.timings["decode_chunks"] >= 32 // 4  # EOS possible: chunks of decode_chunk


def test_first_token_logits(case):
    name, model, prompts, _ = case
    engine = small_engine(model, num_pages=64)
    got = engine.prompt_logits(prompts)
    with torch.no_grad():
        ref = torch.stack([model(torch.tensor([p])).logits[0, -1] for p in prompts])
    diff = (got - ref).abs().max().item()
    print(f"{name}: first-token logits max-abs diff {diff:.3e}")
    assert diff < 1e-4
    assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_greedy_staggered_preempted_eos(case):
    """Prompts arrive in three waves while others decode; a 13-page pool forces preemptions; an EOS
    the model emits mid-completion stops some sequences early."""
    name, model, prompts, ref = case
    # the token most completions emit (not first): stops several of them part-way
    eos = Counter(t for r in ref for t in set(r[1:-1])).most_common(1)[0][0]
    engine = small_engine(model, fuse_projections=True)  # values unchanged: HF below still sees them
    assert engine.runner.fused[0][0] is not None
    seqs = engine.submit(prompts[:6], GREEDY, MAX_NEW, eos_token_id=eos)
    for _ in range(2):
        engine.step()
    seqs += engine.submit(prompts[6:11], GREEDY, MAX_NEW, eos_token_id=eos, first_index=6)
    engine.step()
    seqs += engine.submit(prompts[11:], GREEDY, MAX_NEW, eos_token_id=eos, first_index=11)
    while engine.scheduler.has_work:
        engine.step()
        engine.runner.pages.check()
    assert engine.scheduler.preemptions > 0, "pool was meant to force preemption"
    assert sum(eos in r for r in ref) >= 2
    got = [s.completion().token_ids for s in seqs]
    expected = [truncate(r, eos) for r in ref]
    bad = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert not bad, f"{name}: prompts {bad} differ, first: {got[bad[0]]} vs {expected[bad[0]]}"
    assert engine.runner.pages.pages_free == engine.runner.pages.num_pages - 1  # everything released


def test_greedy_logprobs_are_policy_logprobs(case):
    _, model, prompts, ref = case
    engine = small_engine(model, num_pages=64)
    outs = engine.generate(prompts[:3], GREEDY, 8, ignore_eos=True)
    for p, out in zip(prompts, outs):
        assert out.token_ids == ref[prompts.index(p)][:8]
        with torch.no_grad():
            logits = model(torch.tensor([p + out.token_ids])).logits[0, len(p) - 1:-1]  # [8, V]
        expect = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(out.logprobs), expect, atol=1e-4, rtol=0)


def test_group_shares_prompt_pages(case):
    """n=3 greedy completions of each prompt: prefilled once, full pages shared, equal to HF."""
    _, model, prompts, ref = case
    engine = small_engine(model, max_batch=9, num_pages=40)
    seqs = engine.submit(prompts[:5], GREEDY, MAX_NEW, n=3)
    engine.step()
    pages = engine.runner.pages
    pages.check()
    full = [p for g in range(3) for p in pages.pages[seqs[3 * g].slot][:len(prompts[g]) // PAGE]]
    assert full and all(pages.refs[p] == 3 for p in full), "full prompt pages are shared by the group"
    while engine.scheduler.has_work:
        engine.step()
    for i, s in enumerate(seqs):
        assert s.completion().token_ids == ref[i // 3], f"completion {i}"


def test_sampled_groups_reproducible_under_preemption(case):
    """Per-request seeds: the same draws with a roomy pool and with a tiny one that preempts."""
    _, model, prompts, _ = case
    sampling = Sampling(temperature=0.9, top_p=0.95, top_k=40, min_p=0.02, seed=7)
    roomy = small_engine(model, max_batch=12, num_pages=80).generate(prompts[:6], sampling, 16, n=2)
    tight_engine = small_engine(model, max_batch=6, num_pages=10, decode_chunk=3, decode_chunk_no_eos=3)
    tight = tight_engine.generate(prompts[:6], sampling, 16, n=2)
    assert tight_engine.scheduler.preemptions > 0
    assert [o.token_ids for o in roomy] == [o.token_ids for o in tight]
    torch.testing.assert_close(torch.tensor([o.logprobs for o in roomy]),
                               torch.tensor([o.logprobs for o in tight]), atol=1e-4, rtol=0)
    assert any(roomy[2 * i].token_ids != roomy[2 * i + 1].token_ids for i in range(6)), \
        "the two completions of a prompt should differ"
    assert request_seed(7, 0) != request_seed(7, 1)


def test_bf16_sampling_logprobs_match_the_trainers_at_grpo_temperature():
    """In bf16 at the GRPO sampling (T = 0.1), each sampled token's logprob is what TRL's loss head
    computes from HF's forward (fp32-output projection, then log_softmax(z / T)): the gap TRL's
    importance-sampling correction reads as off-policy. With the logits rounded to bf16 first, the
    gap here was 40 times larger (mean 0.0058 against 0.00014)."""
    model = random_model.build("qwen3-tiny", seed=0).to(torch.bfloat16)
    prompts = make_prompts(4, seed=1)
    sampling = Sampling(temperature=0.1, top_p=0.97, top_k=5, min_p=0.5, seed=3407)
    engine = Engine(model, EngineConfig(max_batch=4, max_seq_len=128, page_size=PAGE, cuda_graphs=False,
                                        compile=False))
    gaps = []
    with torch.no_grad():
        for p, out in zip(prompts, engine.generate(prompts, sampling, 48, ignore_eos=True)):
            ids = torch.tensor([p + out.token_ids])  # [1, P + T]
            h = model.model(input_ids=ids).last_hidden_state[0, len(p) - 1:-1]  # [T, H]
            z = h.float() @ model.lm_head.weight.float().t()  # [T, V]
            trainer = torch.log_softmax(z / 0.1, -1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
            gaps.append((torch.tensor(out.logprobs) - trainer).abs())
    gap = torch.cat(gaps)
    assert gap.mean() < 1e-3 and gap.max() < 0.02, (gap.mean(), gap.max())


def test_processed_logprobs_option_changes_only_what_is_reported():
    """EngineConfig.logprobs="processed" (vLLM's logprobs as TRL requests them), on the prefill's first
    token and every decode step: same tokens, logprobs renormalised over the kept tokens (>= policy's)."""
    model = random_model.build("qwen3-tiny", seed=0)
    prompts = make_prompts(4, seed=1)
    sampling = Sampling(temperature=0.7, top_p=0.9, top_k=8, min_p=0.05, seed=3407)
    outs = {}
    for kind in ("policy", "processed"):
        engine = small_engine(model, cuda_graphs=False, compile=False, logprobs=kind)
        outs[kind] = engine.generate(prompts, sampling, 16, ignore_eos=True)
    for pol, proc in zip(outs["policy"], outs["processed"]):
        assert pol.token_ids == proc.token_ids
        a, b = torch.tensor(pol.logprobs), torch.tensor(proc.logprobs)  # [T]
        assert torch.all(b >= a - 1e-5) and torch.all(b <= 1e-6)
    gained = torch.cat([torch.tensor(q.logprobs) - torch.tensor(p.logprobs)
                        for p, q in zip(outs["policy"], outs["processed"])])
    assert (gained > 1e-3).float().mean() > 0.5  # top-k 8 of 4096 random logits leaves most mass out


def test_prompt_logits_names_a_prompt_longer_than_max_seq_len():
    engine = small_engine(random_model.build("qwen3-tiny", seed=0), cuda_graphs=False, compile=False)
    with pytest.raises(AssertionError, match=r"prompts of \[100\] tokens exceed max_seq_len=88"):
        engine.prompt_logits([[1] * 10, [1] * 100])
