"""The device sampler: greedy, top-k / top-p / min-p masks, exact draws, per-request seeds, logprobs."""
import math

import pytest
import torch

from rollout_bench.engine import sampler
from rollout_bench.engine.sampler import Params, request_seed, sample

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])


def params(B, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seeds=None):
    return Params(torch.full((B,), temperature), torch.full((B,), top_k, dtype=torch.long),
                  torch.full((B,), top_p), torch.full((B,), min_p),
                  torch.tensor(seeds if seeds is not None else [request_seed(3407, i) for i in range(B)]))


def draws(logits_row, n, how="full", cap=64, **kw):
    """n independent draws (distinct request seeds) from one logits row."""
    logits = logits_row.expand(n, -1).clone()
    tok, lp = sample(logits, params(n, **kw), torch.zeros(n, dtype=torch.long), how, cap)
    return tok, lp


def test_greedy_and_logprob():
    logits = torch.randn(5, 100)
    tok, lp = sample(logits, params(5, temperature=0.0), torch.zeros(5, dtype=torch.long), "greedy", 64)
    assert torch.equal(tok, logits.argmax(-1))
    torch.testing.assert_close(lp, torch.log_softmax(logits, -1).gather(1, tok[:, None])[:, 0])


def test_mode_choice():
    assert sampler.mode([(0.0, 0, 1.0, 0.0), (0.0, 5, 0.9, 0.0)], 64, 1000) == "greedy"
    assert sampler.mode([(1.0, 0, 1.0, 0.0), (0.0, 0, 1.0, 0.0)], 64, 1000) == "temperature"  # GRPO's sampling
    assert sampler.mode([(1.0, 0, 1.0, 0.0)], 64, 1000, temperature_path=False) == "full"  # the engine's default
    assert sampler.mode([(0.1, 5, 1.0, 0.0), (1.0, 64, 1.0, 0.0)], 64, 1000) == "topk"
    assert sampler.mode([(0.1, 5, 1.0, 0.0), (1.0, 0, 1.0, 0.0)], 64, 1000) == "full"
    assert sampler.mode([(1.0, 0, 0.95, 0.0)], 64, 1000) == "full"  # top-p truncates: sorted
    assert sampler.mode([(1.0, 0, 1.0, 0.05)], 64, 1000) == "full"  # so does min-p
    assert sampler.mode([(0.1, 5, 1.0, 0.0)], 64, 32) == "full"  # cap not below the vocabulary


@pytest.mark.parametrize("kw, allowed", [
    ({"top_k": 2}, {0, 1}),
    ({"top_p": 0.7}, {0, 1}),  # mass before token 2 is 0.8 >= 0.7
    ({"top_p": 0.85}, {0, 1, 2}),
    ({"min_p": 0.5}, {0, 1}),  # keep p >= 0.25
    ({"min_p": 0.2}, {0, 1, 2}),
    ({"top_k": 3, "top_p": 0.5, "min_p": 0.0}, {0}),  # top-p renormalised over the top-3: 0.5/0.95 >= 0.5 -> stop
])
def test_filters(kw, allowed):
    tok, _ = draws(PROBS.log(), 2000, **kw)
    assert set(tok.tolist()) == allowed


def test_draws_follow_filtered_softmax():
    """Empirical frequencies of 20k draws within 5 sigma of the renormalised kept probabilities."""
    n, T = 20000, 0.7
    logits = PROBS.log()
    tok, lp = draws(logits, n, temperature=T, top_k=3)
    p = torch.softmax(logits / T, -1)[:3]
    p = p / p.sum()
    freq = torch.bincount(tok, minlength=4)[:3].double() / n
    sigma = (p.double() * (1 - p.double()) / n).sqrt()
    assert ((freq - p.double()).abs() < 5 * sigma).all(), (freq, p)
    # the logprob is the policy's log_softmax(logits / T), not the truncated distribution's
    torch.testing.assert_close(lp, torch.log_softmax(logits / T, -1)[tok])


def test_topk_path_equals_full_sort():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 500, generator=g) * 3
    kw = {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "min_p": 0.05}
    pos = torch.arange(64)
    a = sample(logits, params(64, **kw), pos, "topk", 32)
    b = sample(logits, params(64, **kw), pos, "full", 32)
    assert torch.equal(a[0], b[0])
    torch.testing.assert_close(a[1], b[1])


@pytest.mark.parametrize("processed", [False, True])
def test_temperature_path_draws_what_the_full_sort_draws(processed):
    """No sort over the vocabulary: the same tokens and logprobs as the sorted path, greedy rows (the padding of a
    bucket) included, and 'processed' changes nothing where nothing is truncated."""
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(64, 3000, generator=g) * 4  # [B, V]
    p, pos = params(64, temperature=0.9), torch.arange(64) * 7
    p.temperature[[3, 40]] = 0.0
    tok, lp = sample(logits, p, pos, "temperature", 64, processed)
    ref_tok, ref_lp = sample(logits, p, pos, "full", 64)
    assert torch.equal(tok, ref_tok) and len(set(tok.tolist())) > 32
    torch.testing.assert_close(lp, ref_lp)
    assert tok[3] == logits[3].argmax() and tok[40] == logits[40].argmax()


def test_per_request_seed_reproducible_and_independent_of_batch():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(8, 300, generator=g)
    pos = torch.arange(8) + 10
    seeds = [request_seed(11, i) for i in range(8)]
    tok, _ = sample(logits, params(8, seeds=seeds), pos, "full", 64)
    perm = torch.tensor([5, 2, 7, 0, 1, 6, 3, 4])
    tok_perm, _ = sample(logits[perm], params(8, seeds=[seeds[i] for i in perm]), pos[perm], "full", 64)
    assert torch.equal(tok_perm, tok[perm])
    one, _ = sample(logits[3:4], params(1, seeds=seeds[3:4]), pos[3:4], "full", 64)
    assert one.item() == tok[3].item()
    other, _ = sample(logits, params(8, seeds=[request_seed(12, i) for i in range(8)]), pos, "full", 64)
    assert not torch.equal(other, tok)


def test_uniforms_in_open_interval_and_hash_matches_python():
    u = sampler.uniform(torch.tensor([0, 2**32 - 1]), torch.tensor([0, 2**20]), torch.arange(4096).expand(2, -1))
    assert u.min() > 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.02
    x = torch.tensor([0, 1, 12345, 2**32 - 1])
    assert sampler._mix32(x).tolist() == [sampler._mix32(int(v)) for v in x]


# (seed, position, token) whose hash is 2**24 - 1 after the shift: ((2**24 - 1) + 0.5) / 2**24 rounds to
# 1.0 in float32 (ties to even), -log(-log(1.0)) = +inf, and that token wins the Gumbel argmax whatever its
# logit. Once in 2**24 (seed, position, token) triples: with a full sort over a 4096-token vocabulary,
# once in ~4100 steps, about 2% of ~90-token completions got one arbitrary token.
ROUNDS_TO_ONE = (request_seed(3407, 0), 6001, 3742)


def test_uniforms_never_round_to_one():
    seed, pos, token = ROUNDS_TO_ONE
    u = sampler.uniform(torch.tensor([seed]), torch.tensor([pos]), torch.arange(4096)[None])
    assert u.max() < 1 and torch.isfinite(-torch.log(-torch.log(u))).all()
    assert sampler.uniform(torch.tensor([seed]), torch.tensor([pos]), torch.tensor([[token]])).item() < 1


@pytest.mark.parametrize("how", ["full", "topk", "temperature"])
def test_a_negligible_token_is_never_drawn(how):
    """The token whose uniform is the largest the hash gives, at logit -100 against 0 elsewhere (its
    probability e^-100): a Gumbel draw of the grid's largest uniform is ~16.6, so it cannot win."""
    seed, pos, token = ROUNDS_TO_ONE
    logits = torch.zeros(1, 4096)
    logits[0, token] = -100.0
    if how == "topk":  # the candidate set: the token among the top 64 (all others far below)
        logits[0] = -1000.0
        logits[0, :63] = 0.0
        logits[0, token] = -100.0
    p = Params(torch.ones(1), torch.tensor([64 if how == "topk" else 0]), torch.ones(1), torch.zeros(1),
               torch.tensor([seed]))
    tok, lp = sample(logits, p, torch.tensor([pos]), how, 64)
    assert tok.item() != token and lp.item() > -20


def test_greedy_rows_inside_a_sampled_batch():
    logits = torch.randn(4, 50)
    p = params(4, temperature=1.0)
    p.temperature[1] = 0.0
    tok, lp = sample(logits, p, torch.zeros(4, dtype=torch.long), "full", 64)
    assert tok[1] == logits[1].argmax()
    assert math.isclose(lp[1].item(), torch.log_softmax(logits[1], -1).max().item(), abs_tol=1e-5)


@pytest.mark.parametrize("how", ["topk", "full"])
def test_processed_logprobs_are_renormalised_over_the_kept_tokens(how):
    """vLLM's processed logprobs (TRL's logprobs_mode): log of the drawn token's probability in the
    filtered distribution; the policy logprob minus log(kept mass). Greedy rows keep the policy's."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 200, generator=g) * 3
    p = params(6, temperature=0.7, top_k=8, top_p=0.9, min_p=0.05)
    p.temperature[2] = 0.0
    pos = torch.arange(6)
    tok, policy = sample(logits, p, pos, how, 64)
    tok2, processed = sample(logits, p, pos, how, 64, processed=True)
    assert torch.equal(tok, tok2)  # the draw does not depend on what is reported
    for i in range(6):
        t = p.temperature[i].item() or 1.0
        z = logits[i] / t
        kept = torch.zeros(200, dtype=torch.bool)
        order = z.argsort(descending=True)[:8]  # top-k, then top-p over its renormalised mass, then min-p
        probs = torch.softmax(z[order], -1)
        order = order[(probs.cumsum(-1) - probs) < 0.9]
        kept[order[z[order] >= z.max() + math.log(0.05)]] = True
        assert kept[tok[i]] or i == 2
        want = z[tok[i]] - (torch.logsumexp(z, -1) if i == 2 else torch.logsumexp(z[kept], -1))
        assert math.isclose(processed[i].item(), want.item(), abs_tol=1e-5), i
    assert torch.all(processed >= policy - 1e-6) and processed[2] == policy[2]
    assert torch.any(processed > policy + 1e-3)


def _logit_errors(device):
    """Max |logprob error| at T = 0.1 of float_logits and of bf16-rounded logits, against float64."""
    from rollout_bench.engine.logits import float_logits

    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(256, 4096, bias=False).to(device, torch.bfloat16)
    with torch.no_grad():
        head.weight.copy_(torch.randn(4096, 256, generator=g) * 0.5)
    h = torch.randn(8, 256, generator=g).to(device, torch.bfloat16)  # [n, hidden]
    exact = torch.log_softmax(h.double() @ head.weight.double().t() / 0.1, -1)  # [n, V]
    with torch.no_grad():
        z = float_logits(head, h)
        rounded = head(h).float()
    assert z.dtype == torch.float32 and z.shape == (8, 4096)
    err = lambda lg: (torch.log_softmax(lg.double() / 0.1, -1) - exact).abs().max().item()  # noqa: E731
    return err(z), err(rounded)


def test_float_logits_are_not_rounded_to_bf16():
    """The engine's logits keep fp32 precision, as TRL's loss head does: at the GRPO temperature of
    0.1 a bf16 rounding of logits of size ~10 moves the logprobs by tenths of a nat."""
    ours, bf16 = _logit_errors("cpu")
    assert ours < 1e-3 and bf16 > 0.05, (ours, bf16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_float_logits_on_cuda_use_an_fp32_output_matmul():
    ours, bf16 = _logit_errors("cuda")
    assert ours < 1e-3 and bf16 > 0.05, (ours, bf16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_compiled_temperature_path_draws_what_the_eager_one_draws():
    """The decode graphs run sample_temperature compiled (one pass over the logits, ModelRunner): over Qwen3's
    vocabulary it draws the eager path's tokens with the eager path's logprobs (Triton's log may round a last bit
    differently, which could move an exact near-tie), and a row draws the same token in a smaller bucket."""
    from rollout_bench.engine.model_runner import compiled

    B, V = 256, 151936
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(B, V, device="cuda", generator=g) * 3  # [B, V]
    p = Params(torch.full((B,), 0.9, device="cuda"), torch.zeros(B, dtype=torch.long, device="cuda"),
               torch.ones(B, device="cuda"), torch.zeros(B, device="cuda"),
               torch.tensor([request_seed(3407, i) for i in range(B)], device="cuda"))
    p.temperature[7] = 0.0
    pos = torch.arange(B, device="cuda") * 3 + 100
    fn = compiled(sampler.sample_temperature, True)
    tok, lp = fn(logits, p.temperature, p.seed, pos)
    ref_tok, ref_lp = sampler.sample_temperature(logits, p.temperature, p.seed, pos)
    same = tok == ref_tok
    assert same.float().mean().item() >= 0.99 and tok[7] == logits[7].argmax()
    torch.testing.assert_close(lp[same], ref_lp[same], atol=1e-4, rtol=0)
    assert torch.equal(fn(logits[:8], p.temperature[:8], p.seed[:8], pos[:8])[0], tok[:8])


def _top_p_twice(real):
    """A sampler with top-p applied twice (a fault: a logits processor's top-p before the sampler's own)."""

    def sample_(logits, p, positions, how, cap, processed=False):  # logits [B, V]
        probs = torch.softmax(logits / p.temperature[:, None], -1)
        sorted_p, order = probs.sort(-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p
        cut = torch.zeros_like(logits, dtype=torch.bool).scatter(1, order, before >= p.top_p[:, None])
        return real(logits.masked_fill(cut, float("-inf")), p, positions, how, cap, processed)

    return sample_


def _matches(tok, expected: torch.Tensor, n: int) -> bool:
    """Frequencies of n draws within 5 sigma of `expected` (one probability a token), every token."""
    freq = torch.bincount(tok, minlength=len(expected)).double() / n
    sigma = (expected.double() * (1 - expected.double()) / n).sqrt().clamp_min(1 / n)
    return bool(((freq - expected.double()).abs() < 5 * sigma).all())


def test_top_p_draws_once_filtered_and_a_second_pass_is_seen():
    """At top_p 0.6 over [0.5, 0.3, 0.15, 0.05] the nucleus is tokens 0 and 1 (0.625 / 0.375); a second top-p over
    that renormalised pair keeps token 0 alone. The GRPO gate cannot see the fault (the engine reports the untruncated
    policy logprob), this check does."""
    n = 20000
    expected = torch.tensor([0.625, 0.375, 0.0, 0.0])
    logits = PROBS.log().expand(n, -1).clone()
    p, pos = params(n, top_p=0.6), torch.zeros(n, dtype=torch.long)
    for how in ("full", "topk"):
        tok, _ = sample(logits, p, pos, how, 64)
        assert _matches(tok, expected, n), how
        tok, _ = _top_p_twice(sample)(logits, p, pos, how, 64)
        assert not _matches(tok, expected, n) and set(tok.tolist()) == {0}, how


def test_an_engine_on_the_temperature_path_generates_what_the_sorted_path_does():
    """End to end on CPU (eager): option sampler_temperature_path changes the work a step does, not its draws."""
    from rollout_bench.core.workload import Sampling
    from rollout_bench.diagnostics import random_model
    from rollout_bench.engine import Engine, EngineConfig

    model = random_model.build("qwen3-tiny", seed=0)
    g = torch.Generator().manual_seed(4)
    ps = [torch.randint(0, 4096, (n,), generator=g).tolist() for n in (5, 17, 33)]

    def run(on: bool):
        cfg = EngineConfig(max_batch=8, max_seq_len=96, page_size=16, num_pages=40, sampler_temperature_path=on)
        engine = Engine(model, cfg)
        outs = engine.generate(ps, Sampling(temperature=1.0, seed=5), 12, n=2, ignore_eos=True)
        return [o.token_ids for o in outs], torch.tensor([o.logprobs for o in outs])

    (fast, fast_lp), (sorted_, sorted_lp) = run(True), run(False)
    assert fast == sorted_ and len({t for o in fast for t in o}) > 20
    torch.testing.assert_close(fast_lp, sorted_lp)
