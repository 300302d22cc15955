# GRPO training with each rollout backend (the reference once per seed), the reference seeds' noise band,
# then each backend compared against the reference: step by step, and window by window against the band.


wildcard_constraints:
    steps=r"\d+",
    seed=r"\d+(-frozen)?",  # -frozen: the reference's control at learning rate 0 (train.frozen_control)


rule train:
    input:
        model=model_input,
        adapter=lambda wc: lora_dir(wc.model),
        dataset=lambda wc: dataset_input(CFG["train"]["dataset"]),
        autotune=autotune_input,
        code=train_sources,
    output:
        "results/train/{model}/{backend}/steps{steps}-seed{seed}.json",
    params:
        workload=lambda wc: json.dumps(train_workload(wc), sort_keys=True),
        probe=lambda wc: rb_grpo_availability.fingerprint(wc.backend),
        model_dir=lambda wc: model_dir(wc.model),
        adapter=lambda wc: lora_dir(wc.model),
        dataset=dataset_dir(CFG["train"]["dataset"]),
        pin=lambda wc: ",".join(map(str, CFG["gpu"]["pin"].get(wc.backend, []))),
        alone=lease_alone,
        max_wall=f"--max-wall-s {CFG['train']['max_wall_s']}" if CFG["train"]["max_wall_s"] else "",
        cache=CFG["cache_dir"] or "",
    log:
        "results/logs/train/{model}/{backend}/steps{steps}-seed{seed}.log",
    benchmark:
        "results/benchmarks/train/{model}/{backend}/steps{steps}-seed{seed}.tsv"
    threads: GPU_JOB_THREADS
    resources:
        gpu=gpu_slots,
    conda:
        "../envs/core.yaml"
    shell:
        f"{LEASE}{{params.alone}}--pin '{{params.pin}}' -- "
        "python -m rollout_bench train --backend {wildcards.backend} --model {wildcards.model} "
        "--workload {params.workload:q} --model-dir {params.model_dir} --adapter {params.adapter} "
        "--dataset {params.dataset} --steps {wildcards.steps} {params.max_wall} --autotune '{input.autotune}' "
        "--cache-dir '{params.cache}' --out {output} > {log} 2>&1"


rule band:
    input:
        refs=lambda wc: [train_path(wc.model, wc.ref, s) for s in CFG["train"]["seeds"]],
        control=lambda wc: rb_jobs.control_paths(CFG, model_source(wc.model)),
        code=code("grpo.cli:_band"),
    output:
        "results/band/{model}/{ref}.json",
    params:
        window=CFG["train"]["band"]["window"],
        alpha=CFG["train"]["band"]["alpha"],
    log:
        "results/logs/band/{model}/{ref}.log",
    conda:
        "../envs/core.yaml"
    shell:
        "python -m rollout_bench band --refs {input.refs} --control {input.control} --window {params.window} "
        "--alpha {params.alpha} --out {output} > {log} 2>&1"


rule compare:
    input:
        ref=lambda wc: train_path(wc.model, wc.ref, CFG["train"]["seeds"][0]),
        band="results/band/{model}/{ref}.json",
        candidate=lambda wc: train_path(wc.model, wc.candidate, CFG["train"]["seeds"][0]),
        code=code("grpo.cli:_compare"),
    output:
        "results/compare/{model}/{ref}__{candidate}.json",
    log:
        "results/logs/compare/{model}/{ref}__{candidate}.log",
    conda:
        "../envs/core.yaml"
    shell:
        "python -m rollout_bench compare --ref {input.ref} --band {input.band} --candidate {input.candidate} "
        "--out {output} > {log} 2>&1"


rule render_train:
    input:
        stats=TRAIN_STATS,
        comparisons=COMPARE_PATHS,
        bands=BAND_PATHS,
        code=code("report.cli:_render_train"),
    output:
        train_table=report("results/tables/train.md", caption="../workflow/report/train_table.rst",
                           category="Training"),
        equivalence=report("results/tables/equivalence.md", caption="../workflow/report/equivalence.rst",
                           category="Training"),
        chart_html=report("results/charts/train_steps.html", caption="../workflow/report/train_steps.rst",
                          category="Training"),
        chart_svg="results/charts/train_steps.svg",
        chart_png="results/charts/train_steps.png",  # written beside the SVG
    log:
        "results/logs/report/render_train.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m rollout_bench render-train --stats {input.stats} --comparisons {input.comparisons} "
        "--bands {input.bands} "
        "--train-table {output.train_table} --equivalence-table {output.equivalence} "
        "--chart-html {output.chart_html} --chart-svg {output.chart_svg} > {log} 2>&1"
