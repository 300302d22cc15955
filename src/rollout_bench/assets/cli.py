"""`python -m rollout_bench assets <what>`: the asset rules' command line.

`rollout_bench.__main__` wires it with `assets.cli.add_commands(sub)`; the handler imports only the
asset module it builds.
"""
import json


def _assets(a):
    if a.what == "tokenizer":
        from . import tokenizer
        tokenizer.build(a.out, vocab_size=a.vocab_size)
    elif a.what == "dataset":
        from . import dataset
        dataset.build(a.out, a.n, a.seed)
    elif a.what == "model":
        from . import model
        model.build(a.config, a.out, a.tokenizer, a.seed)
    elif a.what == "learnable":
        from . import learnable
        learnable.build(a.out, a.n, a.n_test, a.seed, a.slip_rate)
    elif a.what == "warmstart":
        from . import warmstart
        warmstart.build(a.model, a.dataset, a.out, *warmstart.specs(json.loads(a.spec)))
    elif a.what == "lora":
        from . import lora
        lora.build(a.model, a.out, a.rank, a.alpha, a.targets.split(","), a.init_std, a.seed)
        print(json.dumps(lora.check(a.out)))


def add_commands(sub) -> None:
    from ..core.workload import LORA_TARGETS

    p = sub.add_parser("assets", help="build an offline asset")
    p.add_argument("what", choices=["tokenizer", "dataset", "learnable", "model", "warmstart", "lora"])
    p.add_argument("--out", required=True)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config", help="model config JSON")
    p.add_argument("--tokenizer", help="tokenizer dir copied into the model dir")
    p.add_argument("--n-test", type=int, default=256, help="held-out problems (learnable)")
    p.add_argument("--slip-rate", type=float, default=0.0, help="worked solutions whose answer slips (learnable)")
    p.add_argument("--model", help="model dir (lora, warmstart)")
    p.add_argument("--dataset", help="learnable dataset dir (warmstart)")
    p.add_argument("--spec", help="jobs.warmstart_spec JSON (warmstart)")
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--alpha", type=int, default=64)
    p.add_argument("--targets", default=",".join(LORA_TARGETS), help="comma-separated")
    p.add_argument("--init-std", type=float, default=1e-4)
    p.set_defaults(fn=_assets)
