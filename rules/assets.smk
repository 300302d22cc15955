# Offline assets: tokenizer -> dataset -> model dir (config + seeded weights + tokenizer) -> LoRA.
# `python -m rollout_bench assets <what>` runs one module per asset: that module is each job's code entry.


rule tokenizer:
    input:
        code=code("assets.tokenizer"),
    output:
        directory("results/assets/tokenizer"),
    params:
        vocab_size=CFG["tokenizer"]["vocab_size"],
    log:
        "results/logs/assets/tokenizer.log",
    conda:
        "../envs/core.yaml"
    shell:
        "python -m rollout_bench assets tokenizer --out {output} --vocab-size {params.vocab_size} > {log} 2>&1"


rule dataset:
    input:
        code=code("assets.dataset"),
    output:
        directory("results/assets/dataset"),
    params:
        n=CFG["dataset"]["n_problems"],
        seed=CFG["dataset"]["seed"],
    log:
        "results/logs/assets/dataset.log",
    conda:
        "../envs/core.yaml"
    shell:
        "python -m rollout_bench assets dataset --out {output} --n {params.n} --seed {params.seed} > {log} 2>&1"


rule learnable_dataset:
    input:
        code=code("assets.learnable"),
    output:
        directory("results/assets/dataset-learnable"),
    params:
        n=CFG["warmstart"]["n_train"],
        n_test=CFG["warmstart"]["n_test"],
        seed=CFG["warmstart"]["data_seed"],
        slip_rate=CFG["warmstart"]["slip_rate"],
    log:
        "results/logs/assets/dataset-learnable.log",
    conda:
        "../envs/core.yaml"
    shell:
        "python -m rollout_bench assets learnable --out {output} --n {params.n} --n-test {params.n_test} "
        "--seed {params.seed} --slip-rate {params.slip_rate} > {log} 2>&1"


rule model:
    wildcard_constraints:
        model=CONFIG_NAMES,
    input:
        config="config/models/{model}.json",
        tokenizer="results/assets/tokenizer",
        code=code("assets.model"),
    output:
        directory("results/assets/models/{model}"),
    params:
        seed=CFG["model_seed"],
    log:
        "results/logs/assets/model_{model}.log",
    conda:
        "../envs/core.yaml"
    shell:
        "python -m rollout_bench assets model --config {input.config} --tokenizer {input.tokenizer} "
        "--seed {params.seed} --out {output} > {log} 2>&1"


# SFT of a random-init model on the learnable task; fails, with the numbers, when card.json's gates are missed.
rule warmstart:
    wildcard_constraints:
        model=CONFIG_NAMES,
    input:
        model="results/assets/models/{model}",
        dataset="results/assets/dataset-learnable",
        code=code("assets.warmstart", "host.gpu_lease"),
    output:
        directory("results/assets/models/{model}-warm"),
    params:
        spec=lambda wc: json.dumps(rb_jobs.warmstart_spec(CFG, wc.model), sort_keys=True),
    log:
        "results/logs/assets/warmstart_{model}.log",
    benchmark:
        "results/benchmarks/assets/warmstart_{model}.tsv"
    threads: GPU_JOB_THREADS
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/core.yaml"
    shell:
        f"{LEASE}--pin '' -- "
        "python -m rollout_bench assets warmstart --model {input.model} --dataset {input.dataset} "
        "--spec {params.spec:q} --out {output} > {log} 2>&1"


rule lora:
    input:
        model=model_input,
        code=code("assets.lora"),
    output:
        directory("results/assets/lora/{model}-r{rank}"),
    params:
        model_dir=lambda wc: model_dir(wc.model),
        alpha=CFG["lora"]["alpha"],
        targets=",".join(CFG["lora"]["targets"]),
        init_std=CFG["lora"]["init_std"],
        seed=CFG["lora"]["seed"],
    log:
        "results/logs/assets/lora_{model}-r{rank}.log",
    conda:
        "../envs/core.yaml"
    shell:
        "python -m rollout_bench assets lora --model {params.model_dir} --rank {wildcards.rank} "
        "--alpha {params.alpha} --targets {params.targets} --init-std {params.init_std} "
        "--seed {params.seed} --out {output} > {log} 2>&1"
